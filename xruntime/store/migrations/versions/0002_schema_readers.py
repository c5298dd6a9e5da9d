"""The table ``schema_readers``: which versions' nodes can use the database.

Only a table added: a node of the baseline ignores it, and keeps working on a database
upgraded to this revision.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_schema_readers"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None
keeps_older_nodes = True


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("schema_readers"):  # (made with the tables)
        op.create_table(
            "schema_readers",
            sa.Column("revision", sa.String(32), primary_key=True),
        )
