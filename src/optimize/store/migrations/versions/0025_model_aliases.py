"""Model aliases (`candidate`, `champion`, …) with their history, and who moved every alias of every noun: the
`model_aliases` pointer and `model_alias_moves` history tables, and `moved_by` (the token's name) on each noun's
alias moves. Moves recorded before keep a null `moved_by`.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'model_aliases',
        sa.Column('model_id', sa.Integer(), nullable=False),
        sa.Column('alias', sa.String(length=64), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_model_aliases_model_id_models')),
        sa.ForeignKeyConstraint(['version_id'], ['model_versions.id'],
                                name=op.f('fk_model_aliases_version_id_model_versions')),
        sa.PrimaryKeyConstraint('model_id', 'alias', name=op.f('pk_model_aliases')),
    )
    op.create_table(
        'model_alias_moves',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('model_id', sa.Integer(), nullable=False),
        sa.Column('alias', sa.String(length=64), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('moved_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('moved_by', sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_model_alias_moves_model_id_models')),
        sa.ForeignKeyConstraint(['version_id'], ['model_versions.id'],
                                name=op.f('fk_model_alias_moves_version_id_model_versions')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_model_alias_moves')),
    )
    op.create_index(op.f('ix_model_alias_moves_model_id'), 'model_alias_moves', ['model_id'])
    for table in ('dataset_alias_moves', 'bundle_alias_moves'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('moved_by', sa.String(length=64), nullable=True))


def downgrade() -> None:
    for table in ('bundle_alias_moves', 'dataset_alias_moves'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('moved_by')
    op.drop_index(op.f('ix_model_alias_moves_model_id'), table_name='model_alias_moves')
    op.drop_table('model_alias_moves')
    op.drop_table('model_aliases')
