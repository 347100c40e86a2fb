"""runs_and_models

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('device_holds',
    sa.Column('device_id', sa.String(length=100), nullable=False),
    sa.Column('subject', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=True),
    sa.Column('since', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('device_id', name=op.f('pk_device_holds'))
    )
    with op.batch_alter_table('device_holds', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_device_holds_subject'), ['subject'], unique=False)

    op.create_table('projects',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('archived', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_projects'))
    )
    op.create_table('models',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['namespace'], ['namespaces.name'], name=op.f('fk_models_namespace_namespaces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_models')),
    sa.UniqueConstraint('namespace', 'name', name='uq_models_namespace_name')
    )
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_models_namespace'), ['namespace'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('submission_id', sa.String(length=128), nullable=False),
    sa.Column('submission_digest', sa.String(length=64), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=False),
    sa.Column('method', sa.String(length=16), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('plan', sa.JSON(), nullable=False),
    sa.Column('resolved', sa.JSON(), nullable=False),
    sa.Column('sources', sa.JSON(), nullable=False),
    sa.Column('config_hash', sa.String(length=64), nullable=False),
    sa.Column('base_entry_id', sa.String(length=200), nullable=False),
    sa.Column('base_commit', sa.String(length=64), nullable=False),
    sa.Column('dataset_reference', sa.String(length=200), nullable=False),
    sa.Column('dataset_digest', sa.String(length=71), nullable=False),
    sa.Column('dataset_rows', sa.BigInteger(), nullable=False),
    sa.Column('validation_reference', sa.String(length=200), nullable=True),
    sa.Column('validation_digest', sa.String(length=71), nullable=True),
    sa.Column('model_name', sa.String(length=64), nullable=False),
    sa.Column('device_profile', sa.String(length=64), nullable=False),
    sa.Column('device_count', sa.Integer(), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('warnings', sa.JSON(), nullable=False),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('progress', sa.JSON(), nullable=False),
    sa.Column('checks', sa.JSON(), nullable=True),
    sa.Column('results', sa.JSON(), nullable=False),
    sa.Column('cost', sa.JSON(), nullable=False),
    sa.Column('phase_times', sa.JSON(), nullable=False),
    sa.Column('model_reference', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], name=op.f('fk_runs_project_projects')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs')),
    sa.UniqueConstraint('submission_id', name='uq_runs_submission_id')
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_phase'), ['phase'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_project'), ['project'], unique=False)

    op.create_table('model_versions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('digest', sa.String(length=71), nullable=False),
    sa.Column('variant', sa.String(length=16), nullable=False),
    sa.Column('descriptor', sa.JSON(), nullable=False),
    sa.Column('lineage', sa.JSON(), nullable=False),
    sa.Column('produced_by_kind', sa.String(length=16), nullable=True),
    sa.Column('produced_by_id', sa.String(length=100), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_model_versions_model_id_models')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_model_versions')),
    sa.UniqueConstraint('model_id', 'digest', name='uq_model_versions_model_digest'),
    sa.UniqueConstraint('model_id', 'version', name='uq_model_versions_model_version')
    )
    with op.batch_alter_table('model_versions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_model_versions_model_id'), ['model_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_model_versions_produced_by_id'), ['produced_by_id'], unique=False)

    op.create_table('run_attempts',
    sa.Column('run_id', sa.String(length=32), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('lease_token', sa.String(length=64), nullable=False),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('devices', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('end_reason', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_run_attempts_run_id_runs')),
    sa.PrimaryKeyConstraint('run_id', 'number', name=op.f('pk_run_attempts')),
    sa.UniqueConstraint('lease_token', name=op.f('uq_run_attempts_lease_token'))
    )
    op.create_table('run_metrics',
    sa.Column('run_id', sa.String(length=32), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('values', sa.JSON(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_run_metrics_run_id_runs')),
    sa.PrimaryKeyConstraint('run_id', 'kind', 'step', name=op.f('pk_run_metrics'))
    )
    op.create_table('snapshots',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('run_id', sa.String(length=32), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('epoch', sa.Double(), nullable=True),
    sa.Column('final', sa.Boolean(), nullable=False),
    sa.Column('artifacts', sa.JSON(), nullable=False),
    sa.Column('committed_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_snapshots_run_id_runs')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_snapshots')),
    sa.UniqueConstraint('run_id', 'attempt', 'step', name='uq_snapshots_run_attempt_step')
    )
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_snapshots_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_snapshots_run_id'))

    op.drop_table('snapshots')
    op.drop_table('run_metrics')
    op.drop_table('run_attempts')
    with op.batch_alter_table('model_versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_model_versions_produced_by_id'))
        batch_op.drop_index(batch_op.f('ix_model_versions_model_id'))

    op.drop_table('model_versions')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_project'))
        batch_op.drop_index(batch_op.f('ix_runs_phase'))

    op.drop_table('runs')
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_models_namespace'))

    op.drop_table('models')
    op.drop_table('projects')
    with op.batch_alter_table('device_holds', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_device_holds_subject'))

    op.drop_table('device_holds')
