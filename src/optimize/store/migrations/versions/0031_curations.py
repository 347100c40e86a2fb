"""curations and curation_verdicts: a judge model's verdicts on the candidates of a project's sessions, saved in
chunks; the kept candidates registered as a dataset version.

Revision ID: 0031
Revises: 0030
"""

import sqlalchemy as sa
from alembic import op

revision = '0031'
down_revision = '0030'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('curations',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('key', sa.String(length=128), nullable=False),
    sa.Column('request_digest', sa.String(length=64), nullable=False),
    sa.Column('project', sa.String(length=64), nullable=False),
    sa.Column('sessions', sa.JSON(), nullable=False),
    sa.Column('candidates', sa.BigInteger(), nullable=False),
    sa.Column('judge_reference', sa.String(length=200), nullable=False),
    sa.Column('judge', sa.JSON(), nullable=False),
    sa.Column('instructions', sa.Text(), nullable=False),
    sa.Column('threshold', sa.Float(), nullable=False),
    sa.Column('system_prompt', sa.Text(), nullable=True),
    sa.Column('dataset', sa.String(length=200), nullable=False),
    sa.Column('device_profile', sa.String(length=64), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('devices', sa.JSON(), nullable=True),
    sa.Column('progress', sa.JSON(), nullable=False),
    sa.Column('registered', sa.JSON(), nullable=True),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('created_by', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], name=op.f('fk_curations_project_projects')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_curations')),
    sa.UniqueConstraint('key', name='uq_curations_key')
    )
    op.create_index(op.f('ix_curations_project'), 'curations', ['project'], unique=False)
    op.create_index(op.f('ix_curations_phase'), 'curations', ['phase'], unique=False)
    op.create_table('curation_verdicts',
    sa.Column('curation_id', sa.String(length=32), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('candidate', sa.Text(), nullable=False),
    sa.Column('session_hash', sa.String(length=64), nullable=False),
    sa.Column('kept', sa.Boolean(), nullable=False),
    sa.Column('score', sa.Float(), nullable=True),
    sa.Column('reason', sa.String(length=32), nullable=True),
    sa.Column('detail', sa.Text(), nullable=True),
    sa.Column('output', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['curation_id'], ['curations.id'],
                            name=op.f('fk_curation_verdicts_curation_id_curations')),
    sa.PrimaryKeyConstraint('curation_id', 'position', name=op.f('pk_curation_verdicts'))
    )
    op.create_index(op.f('ix_curation_verdicts_reason'), 'curation_verdicts', ['reason'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_curation_verdicts_reason'), table_name='curation_verdicts')
    op.drop_table('curation_verdicts')
    op.drop_index(op.f('ix_curations_phase'), table_name='curations')
    op.drop_index(op.f('ix_curations_project'), table_name='curations')
    op.drop_table('curations')
