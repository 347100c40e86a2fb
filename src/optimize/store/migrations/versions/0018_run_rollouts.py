"""run_rollouts: a reinforcement run's sample of the rollouts of each update (prompts, completions, each reward
term's score and the weighted total), one row per run and update.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('run_rollouts',
    sa.Column('run_id', sa.String(length=32), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('items', sa.JSON(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_run_rollouts_run_id_runs')),
    sa.PrimaryKeyConstraint('run_id', 'step', name=op.f('pk_run_rollouts'))
    )


def downgrade() -> None:
    op.drop_table('run_rollouts')
