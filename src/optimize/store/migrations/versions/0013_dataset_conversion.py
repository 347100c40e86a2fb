"""dataset_conversion: a version registered from a file of another format records the conversion (source
format, rules applied, rows); its upload session carries the record until the commit.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ('dataset_versions', 'upload_sessions'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('conversion', sa.JSON(), nullable=True))


def downgrade() -> None:
    for table in ('dataset_versions', 'upload_sessions'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('conversion')
