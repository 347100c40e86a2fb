"""job_leases: one lease table for every job kind (the kernel's leases), replacing the per-kind token and
expiry columns. Leases held when the migration runs are carried over.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('job_leases',
    sa.Column('token', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('job_id', sa.String(length=32), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('devices', sa.JSON(), nullable=False),
    sa.Column('granted_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('end_reason', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('token', name=op.f('pk_job_leases'))
    )
    op.create_index(op.f('ix_job_leases_job_id'), 'job_leases', ['job_id'], unique=False)
    op.execute("INSERT INTO job_leases (token, kind, job_id, attempt, devices, granted_at, expires_at) "
               "SELECT lease_token, 'run', run_id, number, devices, started_at, lease_expires_at "
               "FROM run_attempts WHERE state = 'active'")
    for table, kind, active in (('evaluations', 'evaluation', "('RUNNING')"),
                                ('endpoints', 'endpoint', "('STARTING', 'READY')")):
        op.execute(f"INSERT INTO job_leases (token, kind, job_id, attempt, devices, granted_at, expires_at) "
                   f"SELECT lease_token, '{kind}', id, attempt, COALESCE(devices, '[]'), created_at, "
                   f"COALESCE(lease_expires_at, created_at) FROM {table} "
                   f"WHERE phase IN {active} AND lease_token IS NOT NULL")
    with op.batch_alter_table('run_attempts', schema=None) as batch_op:
        batch_op.drop_column('lease_expires_at')
    for table in ('evaluations', 'endpoints'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('lease_expires_at')
            batch_op.drop_column('lease_token')
    # an analysis left running had no expiry: its lease starts now and the reaper decides at the next start
    op.execute("INSERT INTO job_leases (token, kind, job_id, attempt, devices, granted_at, expires_at) "
               "SELECT lease_token, 'analysis', id, attempt, '[]', created_at, created_at FROM analyses "
               "WHERE phase = 'running' AND lease_token IS NOT NULL")
    with op.batch_alter_table('analyses', schema=None) as batch_op:
        batch_op.drop_column('lease_token')


def downgrade() -> None:
    with op.batch_alter_table('analyses', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lease_token', sa.String(length=64), nullable=True))
    for table in ('evaluations', 'endpoints'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('lease_token', sa.String(length=64), nullable=True))
            batch_op.add_column(sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table('run_attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True))
    op.drop_index(op.f('ix_job_leases_job_id'), table_name='job_leases')
    op.drop_table('job_leases')
