"""distillations.submission_id and submission_digest: an idempotency key, so the same request under the same id (a
client's retry, a pipeline's step taken again) reaches the same distillation.

Revision ID: 0032
Revises: 0031
"""

import sqlalchemy as sa
from alembic import op

revision = '0032'
down_revision = '0031'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('distillations') as batch:
        batch.add_column(sa.Column('submission_id', sa.String(length=128), nullable=True))
        batch.add_column(sa.Column('submission_digest', sa.String(length=64), nullable=True))
        batch.create_unique_constraint('uq_distillations_submission_id', ['submission_id'])


def downgrade() -> None:
    with op.batch_alter_table('distillations') as batch:
        batch.drop_constraint('uq_distillations_submission_id', type_='unique')
        batch.drop_column('submission_digest')
        batch.drop_column('submission_id')
