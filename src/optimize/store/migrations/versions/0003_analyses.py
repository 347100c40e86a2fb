"""analyses

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('analyses',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('examples_digest', sa.String(length=71), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('base_entry_id', sa.String(length=200), nullable=False),
    sa.Column('base_commit', sa.String(length=64), nullable=False),
    sa.Column('optimize_version', sa.String(length=32), nullable=False),
    sa.Column('dataset_reference', sa.String(length=200), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('lease_token', sa.String(length=64), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('refused', sa.Boolean(), nullable=False),
    sa.Column('report', sa.JSON(), nullable=True),
    sa.Column('lengths_sha256', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_analyses')),
    sa.UniqueConstraint('examples_digest', 'base_commit', 'optimize_version',
                        name='uq_analyses_examples_commit_version')
    )


def downgrade() -> None:
    op.drop_table('analyses')
