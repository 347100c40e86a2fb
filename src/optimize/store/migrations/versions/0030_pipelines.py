"""pipelines: a plan's ordered stages, each run as a job of its own kind; runs.pipeline: the pipeline and stage a
run trains for.

Revision ID: 0030
Revises: 0029
"""

import sqlalchemy as sa
from alembic import op

revision = '0030'
down_revision = '0029'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('pipelines',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('submission_id', sa.String(length=128), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=False),
    sa.Column('plan', sa.JSON(), nullable=False),
    sa.Column('stages', sa.JSON(), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('created_by', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], name=op.f('fk_pipelines_project_projects')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pipelines')),
    sa.UniqueConstraint('submission_id', name='uq_pipelines_submission_id')
    )
    op.create_index(op.f('ix_pipelines_project'), 'pipelines', ['project'], unique=False)
    op.create_index(op.f('ix_pipelines_phase'), 'pipelines', ['phase'], unique=False)
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('pipeline', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('pipeline')
    op.drop_index(op.f('ix_pipelines_phase'), table_name='pipelines')
    op.drop_index(op.f('ix_pipelines_project'), table_name='pipelines')
    op.drop_table('pipelines')
