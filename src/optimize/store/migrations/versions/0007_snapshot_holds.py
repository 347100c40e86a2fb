"""snapshot_holds

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pinned', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('swept', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('registered', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.drop_column('registered')
        batch_op.drop_column('swept')
        batch_op.drop_column('pinned')
