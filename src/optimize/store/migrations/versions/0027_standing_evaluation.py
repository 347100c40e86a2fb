"""A project's standing evaluation: projects.standing_dataset, standing_grader, standing_grader_instructions and
standing_set_at (null: none), and standing_evaluations, one row per model version evaluated by it (the version, the
dataset and grader as the project held them, and the evaluation started or the refusal of its last try).

Revision ID: 0027
Revises: 0026
"""

import sqlalchemy as sa
from alembic import op

revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('projects') as batch:
        batch.add_column(sa.Column('standing_dataset', sa.String(length=200), nullable=True))
        batch.add_column(sa.Column('standing_grader', sa.String(length=500), nullable=True))
        batch.add_column(sa.Column('standing_grader_instructions', sa.Text(), nullable=True))
        batch.add_column(sa.Column('standing_set_at', sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        'standing_evaluations',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('project', sa.String(64), nullable=False),
        sa.Column('model_version_id', sa.Integer(), nullable=False),
        sa.Column('model_reference', sa.String(200), nullable=False),
        sa.Column('dataset', sa.String(200), nullable=False),
        sa.Column('grader', sa.String(500), nullable=False),
        sa.Column('evaluation_id', sa.String(32), nullable=True),
        sa.Column('refusal', sa.Text(), nullable=True),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('attempted_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_standing_evaluations')),
        sa.ForeignKeyConstraint(['project'], ['projects.name'],
                                name=op.f('fk_standing_evaluations_project_projects')),
        sa.ForeignKeyConstraint(['model_version_id'], ['model_versions.id'],
                                name=op.f('fk_standing_evaluations_model_version_id_model_versions')),
        sa.ForeignKeyConstraint(['evaluation_id'], ['evaluations.id'],
                                name=op.f('fk_standing_evaluations_evaluation_id_evaluations')),
        sa.UniqueConstraint('model_version_id', 'dataset', 'grader',
                            name='uq_standing_evaluations_version_dataset_grader'),
    )
    op.create_index(op.f('ix_standing_evaluations_project'), 'standing_evaluations', ['project'])
    op.create_index(op.f('ix_standing_evaluations_model_version_id'), 'standing_evaluations', ['model_version_id'])


def downgrade() -> None:
    op.drop_index(op.f('ix_standing_evaluations_model_version_id'), table_name='standing_evaluations')
    op.drop_index(op.f('ix_standing_evaluations_project'), table_name='standing_evaluations')
    op.drop_table('standing_evaluations')
    with op.batch_alter_table('projects') as batch:
        batch.drop_column('standing_set_at')
        batch.drop_column('standing_grader_instructions')
        batch.drop_column('standing_grader')
        batch.drop_column('standing_dataset')
