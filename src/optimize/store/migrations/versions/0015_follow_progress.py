"""follow_progress: a run keeps the pre-flight estimate of its steps, tokens and training time (and its basis),
recorded before its devices are claimed, so `runs get` shows it against the time measured; an analysis keeps the
rows its worker measured of the rows it holds, so a follower sees how far it is.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

COLUMNS = (('runs', 'prediction'), ('analyses', 'progress'))


def upgrade() -> None:
    for table, column in COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column(column, sa.JSON(), nullable=True))


def downgrade() -> None:
    for table, column in COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column(column)
