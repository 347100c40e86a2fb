"""run_branch

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('parent_run_id', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('branch', sa.JSON(), nullable=True))
        batch_op.create_index('ix_runs_parent_run_id', ['parent_run_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_parent_run_id')
        batch_op.drop_column('branch')
        batch_op.drop_column('parent_run_id')
