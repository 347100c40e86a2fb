"""registry_images: image blobs the registry checked as they arrived; dataset_versions.images and
upload_sessions.images: the images a version's rows name ({path, sha256, bytes}).

Revision ID: 0034
Revises: 0033
"""

import sqlalchemy as sa
from alembic import op

revision = '0034'
down_revision = '0033'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('registry_images',
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('format', sa.String(length=8), nullable=False),
    sa.Column('width', sa.Integer(), nullable=False),
    sa.Column('height', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('sha256')
    )
    with op.batch_alter_table('dataset_versions') as batch:
        batch.add_column(sa.Column('images', sa.JSON(), nullable=True))
    with op.batch_alter_table('upload_sessions') as batch:
        batch.add_column(sa.Column('images', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('upload_sessions') as batch:
        batch.drop_column('images')
    with op.batch_alter_table('dataset_versions') as batch:
        batch.drop_column('images')
    op.drop_table('registry_images')
