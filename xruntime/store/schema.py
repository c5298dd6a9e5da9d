"""The tables of the job store: ``jobs``, with each job's history (``job_events``), its
large result (``job_results``) and the callbacks to deliver (``callback_outbox``).

``seq`` orders the queue (first in, first out); ``id`` is the public UUID4.  Payloads
(request, result, fault, progress) are the codec's JSON, zlib-compressed when large.
``owner`` is the user who started the job ("" for the anonymous user); ``lane`` is
"service/owner", the queue within the queue that fair shares count by (docs/protocol.md §10):
its index lets a claim visit the first job of each lane instead of every queued job.
``stored_bytes`` is what the row's payloads take, computed by the database itself at
each write whichever statement makes it; with ``owner`` in an index of its own, a
user's stored bytes are summed from the index alone (``[jobs] max_stored_bytes``), with
the ``result_bound`` of their unfinished jobs: what those may still store.
"""

from sqlalchemy import (
    BigInteger,
    Column,
    Computed,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    event,
    text,
)
from sqlalchemy.engine import Connection

metadata = MetaData()

#: The partial indexes of ``jobs``, by name: the rows they hold.
PARTIAL = {
    "ix_jobs_not_before": "not_before IS NOT NULL",
    "ix_jobs_parent": "parent_id IS NOT NULL",
    "ix_jobs_waiting": "waiting_for IS NOT NULL",
}


def _partial(name: str, *columns: str) -> Index:
    """A partial index, as SQLite makes it.  Its PostgreSQL condition is added when the
    schema is made on PostgreSQL (``_partial_on_postgresql``): ``postgresql_where`` here
    would make SQLAlchemy import its PostgreSQL dialect in every process that imports
    this module, on SQLite too (2.4 MB in each of a node's main and HTTP processes)."""
    return Index(name, *columns, sqlite_where=text(PARTIAL[name]))


#: The indexes only PostgreSQL's sums of an owner's stored bytes read (``statements``'
#: ``stored_bytes``); SQLite keeps the figure as a running total instead (``owner_bytes``).
#: Kept on SQLite, they were a tenth of a job cycle's store work (each of its writes
#: moves an entry in each), for no read (revision ``0003_owner_sums_postgresql_only``).
OWNER_SUM_INDEXES = ("ix_jobs_owner_bytes", "ix_jobs_owner_bound", "ix_job_results_owner_bytes")


def _owner_sum(name: str, *columns: str) -> Index:
    """One of ``OWNER_SUM_INDEXES``: made on PostgreSQL only."""
    assert name in OWNER_SUM_INDEXES
    return Index(name, *columns).ddl_if(dialect="postgresql")


#: The bytes a row's payloads take as stored (``length`` of a BLOB/bytea is its size in
#: both dialects); BIGINT, as four payloads together may pass 2**31.
STORED_BYTES = (
    "CAST(length(request) AS BIGINT) + COALESCE(CAST(length(result) AS BIGINT), 0)"
    " + COALESCE(CAST(length(fault) AS BIGINT), 0) + COALESCE(CAST(length(progress) AS BIGINT), 0)"
)

jobs = Table(
    "jobs",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(36), nullable=False, unique=True),
    Column("service", String(100), nullable=False),
    Column("operation", String(100), nullable=False),
    Column("fetch_type", String(100), nullable=False),
    Column("status", String(10), nullable=False),
    Column("request", LargeBinary, nullable=False),
    Column("result", LargeBinary),
    Column("fault", LargeBinary),
    Column("progress", LargeBinary),
    Column("queued_at", BigInteger, nullable=False),
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    Column("first_fetched_at", BigInteger),
    Column("attempts", Integer, nullable=False, default=0),
    Column("node", String(200)),
    Column("lease_until", BigInteger),
    Column("queueing_timeout", BigInteger),
    Column("computation_timeout", BigInteger),
    Column("owner", String(100), nullable=False, server_default=""),
    Column("lane", String(201), nullable=False, server_default=""),
    Column("not_before", BigInteger),  # a retry waits QUEUING until then (ms)
    Column("retries", Integer, nullable=False, server_default="0"),  # retries planned so far
    Column("event_note", String(500)),  # what the change being written is: its event's message
    # child jobs (docs/protocol.md §13): a child names its parent, erased with it, and its place
    # among the children its parent started at one ``run_children`` (the stage)
    Column("parent_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE")),
    Column("child_stage", Integer),
    Column("child_index", Integer),
    # a parent waiting for its children: the stage it waits for (no node holds it
    # meanwhile), and whether one child's failure ends the wait (its siblings are stopped)
    Column("waiting_for", Integer),
    Column("fail_fast", Integer, nullable=False, server_default="0"),
    Column("stored_bytes", BigInteger, Computed(STORED_BYTES, persisted=True)),
    # its callback (docs/protocol.md §14): where the events go, the progress period (ms;
    # NULL: only the end), and when the last progress event was written (``callbacks``)
    Column("callback_url", String(2000)),
    Column("callback_period", Integer),
    Column("callback_progress_at", BigInteger),
    # the bytes its result may take at most, as its service bounds them at the start: they
    # count towards the owner's stored bytes while it is unfinished (``[jobs]
    # max_stored_bytes``), summed from the index below alone (PostgreSQL)
    Column("result_bound", BigInteger, nullable=False, server_default="0"),
    Index("ix_jobs_status_seq", "status", "seq"),
    Index("ix_jobs_status_lane_seq", "status", "lane", "seq"),
    Index("ix_jobs_node", "node"),
    Index("ix_jobs_finished_at", "finished_at"),
    Index("ix_jobs_owner_seq", "owner", "seq"),
    # PostgreSQL sums an owner's stored bytes over these; SQLite reads its running total
    # (``owner_bytes``), and would only pay for them at every write (``_owner_sum``)
    _owner_sum("ix_jobs_owner_bytes", "owner", "stored_bytes"),
    _owner_sum("ix_jobs_owner_bound", "owner", "status", "result_bound"),
    Index("ix_jobs_service_seq", "service", "seq"),
    _partial("ix_jobs_not_before", "not_before"),
    _partial("ix_jobs_parent", "parent_id", "child_stage", "child_index"),
    _partial("ix_jobs_waiting", "seq"),
)

#: Each job's history (docs/protocol.md §11): one row per change, written by the database
#: itself in the statement that makes the change (``store.events``), erased with the job.
job_events = Table(
    "job_events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("job_seq", Integer, ForeignKey("jobs.seq", ondelete="CASCADE"), nullable=False),
    Column("time", BigInteger, nullable=False),  # ms since the epoch, the database's clock
    Column("status", String(10), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("node", String(200)),
    Column("message", String(500), nullable=False),
    Index("ix_job_events_job", "job_seq", "seq"),
)


#: A job's result when it is large (over ``RESULT_ROW_ABOVE`` bytes as stored), in a row of
#: its own, written once when the job ends, erased with the job: SQLite rewrites a whole
#: row at any update of it, so marking a finished job fetched (``first_fetched_at``)
#: read and wrote a 72 MB result again in the fetching HTTP process (+156 MB at 3 000²).
#: ``owner`` and ``bytes`` count towards the owner's stored bytes with ``jobs.stored_bytes``.
#: On SQLite ``job_seq`` is the row's rowid (a result is read by ranges through a blob
#: handle: ``store.result_reader``).
job_results = Table(
    "job_results",
    metadata,
    Column("job_seq", Integer, ForeignKey("jobs.seq", ondelete="CASCADE"), primary_key=True),
    Column("owner", String(100), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("result", LargeBinary, nullable=False),
    _owner_sum("ix_job_results_owner_bytes", "owner", "bytes"),
)
RESULT_ROW_ABOVE = 64 * 1024

#: What a row of ``callback_outbox`` takes as stored, towards its owner's stored bytes:
#: its progress, its URL, and ``OUTBOX_ROW_BYTES`` for the rest.
OUTBOX_ROW_BYTES = 100
OUTBOX_BYTES = f"COALESCE(CAST(length(progress) AS BIGINT), 0) + length(url) + {OUTBOX_ROW_BYTES}"


#: The callbacks still to deliver (docs/protocol.md §14): one row per event, written by the
#: database in the statement that ends the job or stores its progress (``store.callbacks``),
#: deleted when delivered or given up; a job has at most one progress event waiting (a
#: newer one takes its place).  It holds what the body is made of (status, elapsed
#: time, progress as stored), so a job erased meanwhile is still reported; no foreign key.
#: ``node``: the node delivering it now, until ``due_at`` (its lease); otherwise
#: ``due_at`` is its next attempt (ms, the database's clock).  ``history_seq``: the row
#: of the job's history that tells its failed attempts, rewritten at each
#: (``store.outbox``).  ``lease_until`` is unused.  The rows count towards their owner's
#: stored bytes (``OUTBOX_BYTES``).
callback_outbox = Table(
    "callback_outbox",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(36), nullable=False),
    Column("job_seq", Integer, nullable=False),
    Column("owner", String(100), nullable=False),
    Column("url", String(2000), nullable=False),
    Column("type", String(20), nullable=False),
    Column("status", String(10), nullable=False),
    Column("elapsed", BigInteger, nullable=False),
    Column("progress", LargeBinary),
    Column("created_at", BigInteger, nullable=False),
    Column("due_at", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("lease_until", BigInteger),
    Column("node", String(200)),
    Column("history_seq", Integer),
    Index("ix_callback_outbox_due", "due_at"),
    Index("ix_callback_outbox_job", "job_seq"),
    Index("ix_callback_outbox_owner", "owner", "due_at"),
    Index("ix_callback_outbox_node", "node"),
    sqlite_autoincrement=True,  # an id is never used again: it names the event to receivers
)


#: The schema versions whose code can use the database as it is now (one row each): the
#: version it is at and, when the latest versions only added to the schema, the older
#: ones before them, so that a node of an older release keeps working on a database a
#: newer node upgraded (``store.schema_versions``; docs/operations.md, "Upgrading").
schema_readers = Table(
    "schema_readers",
    metadata,
    Column("revision", String(32), primary_key=True),
)


#: The members of an SQLite database's change feed (``store.feed``): the address of
#: each process that uses the file, so that each can send the others the ids of the
#: jobs it changed.  PostgreSQL uses LISTEN/NOTIFY instead (``store.channel``).
feed_metadata = MetaData()

feed_members = Table(
    "feed_members",
    feed_metadata,
    Column("address", String(200), primary_key=True),
    Column("origin", String(200), nullable=False),
    Column("since", BigInteger, nullable=False),
)


@event.listens_for(metadata, "before_create")
def _partial_on_postgresql(target: MetaData, connection: Connection, **kw: object) -> None:
    """Give the partial indexes their PostgreSQL condition before ``create_all`` makes
    the schema on PostgreSQL (a database that exists is upgraded after it,
    ``migrate.upgrade``, which makes its missing indexes with the same condition)."""
    if connection.dialect.name == "postgresql":
        for index in jobs.indexes:
            if index.name in PARTIAL:
                index.dialect_kwargs["postgresql_where"] = text(PARTIAL[index.name])


#: The lane of a parent waiting for its children: none, so that max_running, which
#: counts the jobs of a lane that hold a worker, does not count it (it holds none).
WAITING_LANE = ""


def lane_of(service: str, owner: str) -> str:
    """The lane of a job: its service and its owner (neither holds a "/")."""
    return f"{service}/{owner}"


@event.listens_for(job_results, "after_create")
def _results_uncompressed_on_postgresql(
    target: Table, connection: Connection, **kw: object
) -> None:
    """PostgreSQL stores a large result out of line as it is (``EXTERNAL``), not
    compressed again with pglz: the stored form is compressed already where that pays,
    pglz took a second more at 3 000², and ``substr`` then reads only the slices it
    asks for (``store.result_reader``)."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("ALTER TABLE job_results ALTER COLUMN result SET STORAGE EXTERNAL"))
