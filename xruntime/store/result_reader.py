"""A stored result read by byte ranges, never whole, for an answer written as it is read.

A 5 000 × 5 000 matrix is stored in 200 MB; an HTTP process that read it whole to
answer a fetch would grow by as much.  A ``ResultReader`` reads the ranges a writer
asks for (``store.payload_stream``: the compact form's table, then one piece of its
zlib stream at a time):

* on SQLite, through an incremental blob handle (``sqlite3.Connection.blobopen``) on a
  connection of the pool, held until ``close``: ``substr`` would load the whole blob
  at each call;
* on PostgreSQL, with ``substr(result, start, size)`` (an uncompressed TOASTed value
  is read by its slices).

If the job is erased while it is read: on SQLite the handle goes on reading the snapshot
it was opened on (the answer is finished as it began); on PostgreSQL ``read`` raises
(the answer is cut short).  Never other bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3  # (not loaded in worker processes: 0.8 MB each)

    from .database import Database


class ResultReader:
    """The stored result of one job: ``length`` bytes, ``read(offset, size)``."""

    def __init__(self, database: Database, job_id: str, length: int) -> None:
        self.length = length
        self._database, self._job_id = database, job_id
        self._connection: Any = None  # SQLite: the pooled connection and its blob handle
        self._blob: sqlite3.Blob | None = None

    def read(self, offset: int, size: int) -> bytes:
        size = max(0, min(size, self.length - offset))
        if size == 0:
            return b""
        if self._database.dialect == "sqlite":
            return self._sqlite_read(offset, size)
        _, row = self._database._run(
            "result_piece", False, job_id=self._job_id, start=offset + 1, size=size
        )
        if row is None or row["piece"] is None:
            raise LookupError(f"job {self._job_id} was erased while its result was read")
        return bytes(row["piece"])

    def _sqlite_read(self, offset: int, size: int) -> bytes:
        if self._blob is None:
            _, row = self._database._run("result_rowid", False, job_id=self._job_id)
            if row is None:
                raise LookupError(f"job {self._job_id} was erased before its result was read")
            table, rowid = (
                ("job_results", row["result_seq"])
                if row["result_seq"] is not None
                else ("jobs", row["job_seq"])
            )
            self._connection = self._database.engine.raw_connection()
            driver = self._connection.driver_connection
            self._blob = driver.blobopen(table, "result", rowid, readonly=True)
        self._blob.seek(offset)
        return self._blob.read(size)

    def read_all(self) -> bytes:
        """The whole stored result (a small one)."""
        try:
            return self.read(0, self.length)
        finally:
            self.close()

    def close(self) -> None:
        """Let go of the connection held (SQLite); reading again opens one anew."""
        blob, connection = self._blob, self._connection
        self._blob = self._connection = None
        if blob is not None:
            blob.close()
        if connection is not None:
            connection.close()  # back to the pool
