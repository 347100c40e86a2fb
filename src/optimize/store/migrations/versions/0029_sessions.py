"""sessions: conversation corpora parsed into candidates, each kept as a blob whose sha256 is the session hash, in a
project.

Revision ID: 0029
Revises: 0028
"""

import sqlalchemy as sa
from alembic import op

revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('sessions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('records', sa.BigInteger(), nullable=False),
    sa.Column('candidates', sa.BigInteger(), nullable=False),
    sa.Column('skipped', sa.JSON(), nullable=False),
    sa.Column('bytes', sa.BigInteger(), nullable=False),
    sa.Column('created_by', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], name=op.f('fk_sessions_project_projects')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_sessions')),
    sa.UniqueConstraint('project', 'sha256', name=op.f('uq_sessions_project'))
    )
    op.create_index(op.f('ix_sessions_project'), 'sessions', ['project'], unique=False)
    op.create_index(op.f('ix_sessions_sha256'), 'sessions', ['sha256'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_sessions_sha256'), table_name='sessions')
    op.drop_index(op.f('ix_sessions_project'), table_name='sessions')
    op.drop_table('sessions')
