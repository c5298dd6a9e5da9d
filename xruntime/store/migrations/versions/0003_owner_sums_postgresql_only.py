"""The indexes of the owners' stored-bytes sums on PostgreSQL only.

PostgreSQL sums an owner's stored bytes over ``ix_jobs_owner_bytes``,
``ix_jobs_owner_bound`` and ``ix_job_results_owner_bytes``; SQLite reads the same figure
from its running total (``owner_bytes``), and paid for the three indexes at every write
all the same (``schema.OWNER_SUM_INDEXES``).  On SQLite they are dropped; on PostgreSQL
nothing changes.  Only indexes dropped that no query of an older node reads on SQLite:
a node of the revision before keeps working on the database.
"""

from alembic import op

revision = "0003_owner_sums_postgresql_only"
down_revision = "0002_schema_readers"
branch_labels = None
depends_on = None
keeps_older_nodes = True

#: (the names of ``schema.OWNER_SUM_INDEXES``, as this revision found them)
DROPPED = ("ix_jobs_owner_bytes", "ix_jobs_owner_bound", "ix_job_results_owner_bytes")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name in DROPPED:
        op.execute(f"DROP INDEX IF EXISTS {name}")
