"""comparisons: a source snapshot's model and candidate models scored on one evaluation dataset and grader, each by
an evaluation (reused where one was done), the winner named and, when asked, promoted.

Revision ID: 0028
Revises: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = '0028'
down_revision = '0027'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('comparisons',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=False),
    sa.Column('source_snapshot_id', sa.String(length=32), nullable=False),
    sa.Column('entries', sa.JSON(), nullable=False),
    sa.Column('dataset_reference', sa.String(length=200), nullable=False),
    sa.Column('dataset_digest', sa.String(length=71), nullable=False),
    sa.Column('dataset_rows', sa.BigInteger(), nullable=False),
    sa.Column('grader', sa.String(length=500), nullable=False),
    sa.Column('max_new_tokens', sa.Integer(), nullable=False),
    sa.Column('device_profile', sa.String(length=64), nullable=False),
    sa.Column('promote', sa.String(length=64), nullable=True),
    sa.Column('margin', sa.Float(), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('result', sa.JSON(), nullable=True),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('created_by', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], name=op.f('fk_comparisons_project_projects')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_comparisons'))
    )
    op.create_index(op.f('ix_comparisons_project'), 'comparisons', ['project'], unique=False)
    op.create_index(op.f('ix_comparisons_phase'), 'comparisons', ['phase'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_comparisons_phase'), table_name='comparisons')
    op.drop_index(op.f('ix_comparisons_project'), table_name='comparisons')
    op.drop_table('comparisons')
