"""distillations and distillation_answers: a teacher's answers to a dataset's decisions, saved in chunks; and
dataset_versions.lineage: what produced a version, when a job did.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('dataset_versions') as batch:
        batch.add_column(sa.Column('lineage', sa.JSON(), nullable=True))
    op.create_table('distillations',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=False),
    sa.Column('teacher_reference', sa.String(length=200), nullable=False),
    sa.Column('teacher', sa.JSON(), nullable=False),
    sa.Column('source_reference', sa.String(length=200), nullable=False),
    sa.Column('source_digest', sa.String(length=71), nullable=False),
    sa.Column('source_rows', sa.BigInteger(), nullable=False),
    sa.Column('target', sa.String(length=200), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('device_profile', sa.String(length=64), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('devices', sa.JSON(), nullable=True),
    sa.Column('progress', sa.JSON(), nullable=False),
    sa.Column('smoke', sa.JSON(), nullable=True),
    sa.Column('registered', sa.JSON(), nullable=True),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], name=op.f('fk_distillations_project_projects')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_distillations'))
    )
    op.create_index(op.f('ix_distillations_project'), 'distillations', ['project'], unique=False)
    op.create_index(op.f('ix_distillations_phase'), 'distillations', ['phase'], unique=False)
    op.create_table('distillation_answers',
    sa.Column('distillation_id', sa.String(length=32), nullable=False),
    sa.Column('line', sa.Integer(), nullable=False),
    sa.Column('message', sa.Integer(), nullable=False),
    sa.Column('accepted', sa.Boolean(), nullable=False),
    sa.Column('reason', sa.String(length=32), nullable=True),
    sa.Column('detail', sa.Text(), nullable=True),
    sa.Column('output', sa.Text(), nullable=False),
    sa.Column('row', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['distillation_id'], ['distillations.id'],
                            name=op.f('fk_distillation_answers_distillation_id_distillations')),
    sa.PrimaryKeyConstraint('distillation_id', 'line', 'message', name=op.f('pk_distillation_answers'))
    )
    op.create_index(op.f('ix_distillation_answers_reason'), 'distillation_answers', ['reason'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_distillation_answers_reason'), table_name='distillation_answers')
    op.drop_table('distillation_answers')
    op.drop_index(op.f('ix_distillations_phase'), table_name='distillations')
    op.drop_index(op.f('ix_distillations_project'), table_name='distillations')
    op.drop_table('distillations')
    with op.batch_alter_table('dataset_versions') as batch:
        batch.drop_column('lineage')
