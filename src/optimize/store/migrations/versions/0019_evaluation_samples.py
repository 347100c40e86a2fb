"""evaluation_predictions.samples: a sampling evaluation's group of answers for a row (each answer, its score,
explanation and fields); null for a row answered once, greedily.

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('evaluation_predictions') as batch:
        batch.add_column(sa.Column('samples', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('evaluation_predictions') as batch:
        batch.drop_column('samples')
