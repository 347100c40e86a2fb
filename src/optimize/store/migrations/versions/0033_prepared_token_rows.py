"""Prepared token rows: dataset_versions.prepared and upload_sessions.prepared (the descriptor, and on a version its
longest row), shards.longest (a Parquet file's longest row).

Revision ID: 0033
Revises: 0032
"""

import sqlalchemy as sa
from alembic import op

revision = '0033'
down_revision = '0032'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('dataset_versions') as batch:
        batch.add_column(sa.Column('prepared', sa.JSON(), nullable=True))
    with op.batch_alter_table('upload_sessions') as batch:
        batch.add_column(sa.Column('prepared', sa.JSON(), nullable=True))
    with op.batch_alter_table('shards') as batch:
        batch.add_column(sa.Column('longest', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('shards') as batch:
        batch.drop_column('longest')
    with op.batch_alter_table('upload_sessions') as batch:
        batch.drop_column('prepared')
    with op.batch_alter_table('dataset_versions') as batch:
        batch.drop_column('prepared')
