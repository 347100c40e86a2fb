"""base_model_additions: models an administrator added to the catalog (`base-models add`); a selection records the
revision asked for and the parameters counted in its files.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('base_model_additions',
    sa.Column('entry_id', sa.String(length=200), nullable=False),
    sa.Column('repository', sa.String(length=200), nullable=False),
    sa.Column('entry', sa.JSON(), nullable=False),
    sa.Column('added_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('entry_id', name=op.f('pk_base_model_additions')),
    sa.UniqueConstraint('repository', name=op.f('uq_base_model_additions_repository'))
    )
    with op.batch_alter_table('base_model_selections', schema=None) as batch_op:
        batch_op.add_column(sa.Column('revision', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('parameters', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('base_model_selections', schema=None) as batch_op:
        batch_op.drop_column('parameters')
        batch_op.drop_column('revision')
    op.drop_table('base_model_additions')
