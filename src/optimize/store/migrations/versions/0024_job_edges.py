"""job_edges: the job graph (`jobs.graph`). One row says a job waits for another and which of its outputs it takes
(an analysis's report, a distillation's registered dataset version); the scheduler grants a job only when every
edge into it is satisfied, and an upstream that failed or was cancelled ends the waiting job by one rule.

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_edges',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('kind', sa.String(32), nullable=False),
        sa.Column('job_id', sa.String(32), nullable=False),
        sa.Column('upstream_kind', sa.String(32), nullable=False),
        sa.Column('upstream_id', sa.String(32), nullable=False),
        sa.Column('output', sa.String(32), nullable=True),
        sa.Column('if_upstream_fails', sa.String(16), nullable=False),
        sa.Column('waits_until', sa.DateTime(timezone=True), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_job_edges')),
        sa.UniqueConstraint('kind', 'job_id', 'upstream_kind', 'upstream_id', name=op.f('uq_job_edges_kind')),
    )
    op.create_index(op.f('ix_job_edges_job_id'), 'job_edges', ['job_id'])
    op.create_index(op.f('ix_job_edges_upstream_id'), 'job_edges', ['upstream_id'])


def downgrade() -> None:
    op.drop_index(op.f('ix_job_edges_upstream_id'), table_name='job_edges')
    op.drop_index(op.f('ix_job_edges_job_id'), table_name='job_edges')
    op.drop_table('job_edges')
