"""endpoints.load: what an endpoint's worker last reported of its load (requests served, in flight and queued,
tokens generated, tokens/s and latency percentiles over the last minute); null before its first report.

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('endpoints') as batch:
        batch.add_column(sa.Column('load', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('endpoints') as batch:
        batch.drop_column('load')
