"""Room left on the job store's disk, against ``[database] min_free_bytes``.

A SQLite node keeps its database and its result files on one local disk.  When that
disk fills, a job whose result finds no room fails (``engine.spill.NoRoom``,
``store.unavailable.StoreFull``), but so would, soon, every small write of every user.
A node therefore refuses new starts while the room left is under the floor
(``TemporarilyUnavailableFault``, HTTP 503), so that the room goes to the jobs already
accepted, and ``/readyz`` says why, so that a load balancer sends starts elsewhere.

PostgreSQL's disk is the database server's, not measured here: its own disk-full
answer fails the job that needed the room (``StoreFull``), and its monitoring is the
database administrator's.
"""

import os


class DiskRoom:
    """The free space of the filesystem holding ``folder`` (None: not measured here)."""

    def __init__(self, folder: str | None) -> None:
        self.folder = folder

    def free_bytes(self) -> int | None:
        """Bytes an unprivileged writer may still use there (``statvfs``, 1 µs), or None."""
        if self.folder is None:
            return None
        try:
            found = os.statvfs(self.folder)
        except OSError:  # the folder is gone: the store's own writes will say more
            return None
        return found.f_bavail * found.f_frsize

    def shortfall(self, floor: int) -> str | None:
        """Why starts are refused now (the room left is under ``floor``), or None."""
        if not floor:
            return None
        free = self.free_bytes()
        if free is None or free >= floor:
            return None
        return (
            f"the job store's disk has {free} bytes free, under [database] min_free_bytes "
            f"of {floor}"
        )


def of_store(result_folder: str | None) -> DiskRoom:
    """The room of a store: a SQLite store's database folder (its result files are
    beside it), or nothing measured for PostgreSQL (``result_folder`` None)."""
    return DiskRoom(None if result_folder is None else os.path.dirname(result_folder))
