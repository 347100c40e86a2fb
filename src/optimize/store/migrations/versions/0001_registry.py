"""registry: namespaces, datasets, versions, shards, aliases, uploads, events

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('subject', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_events'))
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_events_subject'), ['subject'], unique=False)

    op.create_table('namespaces',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('archived', sa.Boolean(), nullable=False),
    sa.Column('archived_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_namespaces'))
    )
    op.create_table('shards',
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('rows', sa.BigInteger(), nullable=False),
    sa.Column('lines', sa.BigInteger(), nullable=False),
    sa.Column('tool_rows', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('sha256', name=op.f('pk_shards'))
    )
    op.create_table('datasets',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['namespace'], ['namespaces.name'], name=op.f('fk_datasets_namespace_namespaces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_datasets')),
    sa.UniqueConstraint('namespace', 'name', name='uq_datasets_namespace_name')
    )
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_datasets_namespace'), ['namespace'], unique=False)

    op.create_table('dataset_versions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('digest', sa.String(length=71), nullable=False),
    sa.Column('format', sa.String(length=32), nullable=False),
    sa.Column('rows', sa.BigInteger(), nullable=False),
    sa.Column('tool_rows', sa.BigInteger(), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('object_count', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['datasets.id'], name=op.f('fk_dataset_versions_dataset_id_datasets')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dataset_versions')),
    sa.UniqueConstraint('dataset_id', 'digest', name='uq_dataset_versions_dataset_digest'),
    sa.UniqueConstraint('dataset_id', 'version', name='uq_dataset_versions_dataset_version')
    )
    with op.batch_alter_table('dataset_versions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dataset_versions_dataset_id'), ['dataset_id'], unique=False)

    op.create_table('dataset_alias_moves',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('alias', sa.String(length=64), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('moved_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['datasets.id'], name=op.f('fk_dataset_alias_moves_dataset_id_datasets')),
    sa.ForeignKeyConstraint(['version_id'], ['dataset_versions.id'],
                            name=op.f('fk_dataset_alias_moves_version_id_dataset_versions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dataset_alias_moves'))
    )
    with op.batch_alter_table('dataset_alias_moves', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dataset_alias_moves_dataset_id'), ['dataset_id'], unique=False)

    op.create_table('dataset_aliases',
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('alias', sa.String(length=64), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['datasets.id'], name=op.f('fk_dataset_aliases_dataset_id_datasets')),
    sa.ForeignKeyConstraint(['version_id'], ['dataset_versions.id'],
                            name=op.f('fk_dataset_aliases_version_id_dataset_versions')),
    sa.PrimaryKeyConstraint('dataset_id', 'alias', name=op.f('pk_dataset_aliases'))
    )
    op.create_table('dataset_objects',
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('path', sa.String(length=64), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('rows', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['sha256'], ['shards.sha256'], name=op.f('fk_dataset_objects_sha256_shards')),
    sa.ForeignKeyConstraint(['version_id'], ['dataset_versions.id'],
                            name=op.f('fk_dataset_objects_version_id_dataset_versions')),
    sa.PrimaryKeyConstraint('version_id', 'position', name=op.f('pk_dataset_objects'))
    )
    op.create_table('upload_sessions',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('content_key', sa.String(length=64), nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('format', sa.String(length=32), nullable=False),
    sa.Column('digest', sa.String(length=71), nullable=False),
    sa.Column('manifest', sa.JSON(), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['version_id'], ['dataset_versions.id'],
                            name=op.f('fk_upload_sessions_version_id_dataset_versions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_upload_sessions')),
    sa.UniqueConstraint('content_key', name=op.f('uq_upload_sessions_content_key'))
    )


def downgrade() -> None:
    op.drop_table('upload_sessions')
    op.drop_table('dataset_objects')
    op.drop_table('dataset_aliases')
    with op.batch_alter_table('dataset_alias_moves', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dataset_alias_moves_dataset_id'))

    op.drop_table('dataset_alias_moves')
    with op.batch_alter_table('dataset_versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dataset_versions_dataset_id'))

    op.drop_table('dataset_versions')
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_datasets_namespace'))

    op.drop_table('datasets')
    op.drop_table('shards')
    op.drop_table('namespaces')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_events_subject'))

    op.drop_table('events')
