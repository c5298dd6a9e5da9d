"""A stored result read by byte ranges, never whole, for an answer written as it is read.

A large result may take hundreds of megabytes stored; an HTTP process that read it
whole to answer a fetch would grow by as much.  A ``ResultReader`` reads the ranges a writer
asks for (``payload.stream``: the compact form's table, then one piece of its
zlib stream at a time):

* on SQLite, through an incremental blob handle (``sqlite3.Connection.blobopen``)
  opened for each read and closed after it, a window of ``SQLITE_WINDOW`` bytes at a
  time: ``substr`` would load the whole blob at each call; a handle kept open would hold
  a connection of the pool and a read snapshot (which stops the WAL from being
  checkpointed) for as long as a slow client takes to read the answer; and a new
  handle walks the result's chain of overflow pages up to the offset, a cost paid once
  per window: the larger the window the fewer walks, for that much more memory of the
  HTTP process (docs/architecture.md has the figures);
* on PostgreSQL, with ``substr(result, start, size)`` (an uncompressed out-of-line
  value is read by its slices);
* from its file, when the row refers to one (``result_files``: SQLite's large results).

If the job is erased while it is read, the next ``read`` raises LookupError (the answer
is cut short), never answering other bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3  # (not loaded in worker processes: 0.8 MB each)

    from .database import Database


#: Bytes read through one SQLite blob handle (and kept until read).
SQLITE_WINDOW = 8 << 20


class ResultReader:
    """The stored result of one job: ``length`` bytes, ``read(offset, size)``."""

    def __init__(
        self, database: Database, job_id: str, length: int, held: bytes | None = None
    ) -> None:
        """``held``: the whole result, read already (one in the job's row, small: a
        fetch reads it with the record, in one statement)."""
        self.length = length
        self._database, self._job_id = database, job_id
        # (offset, bytes held): the whole result, or SQLite's window read ahead
        self._window: tuple[int, bytes] = (0, held or b"")

    def read(self, offset: int, size: int) -> bytes:
        size = max(0, min(size, self.length - offset))
        if size == 0:
            return b""
        start, held = self._window
        if start <= offset and offset + size <= start + len(held):
            return held[offset - start : offset - start + size]
        if self._database.dialect == "sqlite":
            self._window = (0, b"")  # (let go before the next is read)
            self._window = (offset, self._sqlite_range(offset, max(size, SQLITE_WINDOW)))
            return self._window[1][:size]
        _, row = self._database._run(
            "result_piece", False, job_id=self._job_id, start=offset + 1, size=size
        )
        if row is None or row["piece"] is None:
            raise LookupError(f"job {self._job_id} was erased while its result was read")
        return bytes(row["piece"])

    def _sqlite_range(self, offset: int, size: int) -> bytes:
        size = min(size, self.length - offset)
        _, row = self._database._run("result_rowid", False, job_id=self._job_id)
        if row is None:
            raise LookupError(f"job {self._job_id} was erased while its result was read")
        table, rowid = (
            ("job_results", row["result_seq"])
            if row["result_seq"] is not None
            else ("jobs", row["job_seq"])
        )
        connection = self._database.engine.raw_connection()
        driver: sqlite3.Connection = connection.driver_connection  # type: ignore[assignment]
        try:
            with driver.blobopen(table, "result", rowid, readonly=True) as blob:
                if len(blob) == self.length:
                    blob.seek(offset)
                    return blob.read(size)
                reference = blob.read()  # (a reference: a few bytes)
        finally:
            connection.close()  # back to the pool
        located = self._database._located(reference)
        if located is None:
            raise LookupError(f"job {self._job_id}'s stored result is not {self.length} bytes")
        return located.read(offset, size)

    def read_all(self) -> bytes:
        """The whole stored result (a small one)."""
        return self.read(0, self.length)

    def close(self) -> None:
        """Let go of the bytes held (no connection is held between reads)."""
        self._window = (0, b"")
