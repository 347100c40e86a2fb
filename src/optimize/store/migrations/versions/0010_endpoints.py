"""endpoints

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('endpoints',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=False),
    sa.Column('model_reference', sa.String(length=200), nullable=False),
    sa.Column('base', sa.JSON(), nullable=False),
    sa.Column('adapters', sa.JSON(), nullable=False),
    sa.Column('device_profile', sa.String(length=64), nullable=False),
    sa.Column('phase', sa.String(length=24), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('lease_token', sa.String(length=64), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('devices', sa.JSON(), nullable=True),
    sa.Column('address', sa.String(length=200), nullable=True),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ready_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], name=op.f('fk_endpoints_project_projects')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_endpoints'))
    )
    op.create_index(op.f('ix_endpoints_project'), 'endpoints', ['project'], unique=False)
    op.create_index(op.f('ix_endpoints_phase'), 'endpoints', ['phase'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_endpoints_phase'), table_name='endpoints')
    op.drop_index(op.f('ix_endpoints_project'), table_name='endpoints')
    op.drop_table('endpoints')
