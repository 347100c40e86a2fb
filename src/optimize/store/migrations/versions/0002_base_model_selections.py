"""base model selections

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('base_model_selections',
    sa.Column('entry_id', sa.String(length=200), nullable=False),
    sa.Column('repository', sa.String(length=200), nullable=False),
    sa.Column('commit', sa.String(length=64), nullable=False),
    sa.Column('content_digest', sa.String(length=64), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('selected_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('entry_id', name=op.f('pk_base_model_selections'))
    )


def downgrade() -> None:
    op.drop_table('base_model_selections')
