"""evaluations

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('evaluations',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=False),
    sa.Column('model_reference', sa.String(length=200), nullable=False),
    sa.Column('model', sa.JSON(), nullable=False),
    sa.Column('dataset_reference', sa.String(length=200), nullable=False),
    sa.Column('dataset_digest', sa.String(length=71), nullable=False),
    sa.Column('dataset_rows', sa.BigInteger(), nullable=False),
    sa.Column('grader', sa.String(length=500), nullable=False),
    sa.Column('device_profile', sa.String(length=64), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('lease_token', sa.String(length=64), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('devices', sa.JSON(), nullable=True),
    sa.Column('progress', sa.JSON(), nullable=False),
    sa.Column('report', sa.JSON(), nullable=True),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], name=op.f('fk_evaluations_project_projects')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_evaluations'))
    )
    op.create_index(op.f('ix_evaluations_project'), 'evaluations', ['project'], unique=False)
    op.create_index(op.f('ix_evaluations_phase'), 'evaluations', ['phase'], unique=False)
    op.create_table('evaluation_predictions',
    sa.Column('evaluation_id', sa.String(length=32), nullable=False),
    sa.Column('line', sa.Integer(), nullable=False),
    sa.Column('prompt', sa.Text(), nullable=False),
    sa.Column('expected', sa.Text(), nullable=False),
    sa.Column('answer', sa.Text(), nullable=False),
    sa.Column('score', sa.Float(), nullable=True),
    sa.Column('explanation', sa.Text(), nullable=True),
    sa.Column('fields', sa.JSON(), nullable=True),
    sa.Column('chat_template_sha256', sa.String(length=71), nullable=False),
    sa.Column('base_model_revision', sa.String(length=64), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['evaluation_id'], ['evaluations.id'],
                            name=op.f('fk_evaluation_predictions_evaluation_id_evaluations')),
    sa.PrimaryKeyConstraint('evaluation_id', 'line', name=op.f('pk_evaluation_predictions'))
    )


def downgrade() -> None:
    op.drop_table('evaluation_predictions')
    op.drop_index(op.f('ix_evaluations_phase'), table_name='evaluations')
    op.drop_index(op.f('ix_evaluations_project'), table_name='evaluations')
    op.drop_table('evaluations')
