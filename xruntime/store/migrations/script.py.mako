"""${message}

Revision ${up_revision}, after ${down_revision | comma,n}.
"""

from alembic import op

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None
#: whether a node of the release before can still use the database once this is
#: applied (only added nullable columns, tables or indexes): decide, then set
keeps_older_nodes = False


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}
