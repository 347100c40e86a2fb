"""runs.guards: what a reinforcement run's guards found as its metrics arrived (`training.server.guards`): its
window, the first window's reward, its warnings and the stop `execution.stopWhen` asked for; null for other runs
and before the first update.

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('guards', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('guards')
