"""bundles: named scoring bundles, their immutable versions (a ZIP archive's blob and what it holds), aliases and
alias history.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('bundles',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['namespace'], ['namespaces.name'], name=op.f('fk_bundles_namespace_namespaces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bundles')),
    sa.UniqueConstraint('namespace', 'name', name='uq_bundles_namespace_name')
    )
    with op.batch_alter_table('bundles', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_bundles_namespace'), ['namespace'], unique=False)

    op.create_table('bundle_versions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('bundle_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('uncompressed_bytes', sa.BigInteger(), nullable=False),
    sa.Column('members', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['bundle_id'], ['bundles.id'], name=op.f('fk_bundle_versions_bundle_id_bundles')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bundle_versions')),
    sa.UniqueConstraint('bundle_id', 'sha256', name='uq_bundle_versions_bundle_sha256'),
    sa.UniqueConstraint('bundle_id', 'version', name='uq_bundle_versions_bundle_version')
    )
    with op.batch_alter_table('bundle_versions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_bundle_versions_bundle_id'), ['bundle_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_bundle_versions_sha256'), ['sha256'], unique=False)

    op.create_table('bundle_aliases',
    sa.Column('bundle_id', sa.Integer(), nullable=False),
    sa.Column('alias', sa.String(length=64), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['bundle_id'], ['bundles.id'], name=op.f('fk_bundle_aliases_bundle_id_bundles')),
    sa.ForeignKeyConstraint(['version_id'], ['bundle_versions.id'],
                            name=op.f('fk_bundle_aliases_version_id_bundle_versions')),
    sa.PrimaryKeyConstraint('bundle_id', 'alias', name=op.f('pk_bundle_aliases'))
    )
    op.create_table('bundle_alias_moves',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('bundle_id', sa.Integer(), nullable=False),
    sa.Column('alias', sa.String(length=64), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('moved_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['bundle_id'], ['bundles.id'], name=op.f('fk_bundle_alias_moves_bundle_id_bundles')),
    sa.ForeignKeyConstraint(['version_id'], ['bundle_versions.id'],
                            name=op.f('fk_bundle_alias_moves_version_id_bundle_versions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bundle_alias_moves'))
    )
    with op.batch_alter_table('bundle_alias_moves', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_bundle_alias_moves_bundle_id'), ['bundle_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('bundle_alias_moves', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_bundle_alias_moves_bundle_id'))
    op.drop_table('bundle_alias_moves')
    op.drop_table('bundle_aliases')
    with op.batch_alter_table('bundle_versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_bundle_versions_sha256'))
        batch_op.drop_index(batch_op.f('ix_bundle_versions_bundle_id'))
    op.drop_table('bundle_versions')
    with op.batch_alter_table('bundles', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_bundles_namespace'))
    op.drop_table('bundles')
