"""runs.config_name: the name a run's column takes in its project's scores tables (the plan's `configName`, or
set later with the run's description by `PATCH /v1/training/runs/{id}`); null for runs admitted before it.

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('config_name', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('config_name')
