"""The baseline: the schema of the last release without schema versions.

Every database made before (back to the first, through ``store.migrate``) is brought to
it and then marked with this revision; a new database is made at the latest revision
directly (``schema.metadata``).  It changes nothing itself.
"""

revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None
keeps_older_nodes = True


def upgrade() -> None:
    pass
