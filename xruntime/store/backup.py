"""``xruntime backup PATH``: an online, consistent copy of a SQLite node's job store.

The copy is a folder (0700) holding ``xruntime.db`` (0600) and ``xruntime.db.results/``
(0700, each file 0600), the layout of a node's ``data/`` folder: restoring is putting
both in place while the node is stopped (docs/operations.md, "Backup and restore").

Consistent while the node serves: the database's write lock is held for the copy, so no
job finishes, no result file is taken in and none is swept (``result_files.sweep`` runs
under that lock too) between the snapshot of the database and the copy of the files it
refers to; readers go on meanwhile (WAL).  The database is copied with SQLite's own
online backup, in one step; each referenced result file is hard-linked when the copy is
on the same filesystem (a result file is never changed once in place, only removed),
and copied otherwise.  The node's writes wait for the lock meanwhile, a few hundred
milliseconds for a database of some hundred MB and hard links; copying large result
files to another filesystem makes them wait longer, up to the store's 10 s patience,
past which its callers are told to try again.

PostgreSQL keeps everything in the database: ``pg_dump`` is its backup.
"""

import os
import shutil
import sqlite3
import time

from . import result_files, sqlite
from .schema import job_results

#: The copy's names, a node's ``data/`` folder's.
DATABASE = "xruntime.db"
RESULTS = DATABASE + result_files.SUFFIX


class BackupRefused(Exception):
    """The backup cannot be made (one line: why)."""


def backup(database_path: str, target: str) -> tuple[int, int, float]:
    """Copy the SQLite database at ``database_path`` and its result files into the new
    folder ``target``; answers (the database's bytes, the result files, the seconds the
    write lock was held)."""
    if os.path.exists(target) and os.listdir(target):
        raise BackupRefused(f"{target} exists and is not empty: name a new folder")
    if not os.path.isfile(database_path):
        raise BackupRefused(f"there is no database at {database_path}")
    os.makedirs(target, mode=0o700, exist_ok=True)
    os.chmod(target, 0o700)
    copy_path = os.path.join(target, DATABASE)
    sqlite.make_private_file(copy_path)
    source_folder = result_files.folder_of(database_path)
    copy_folder = result_files.make_private_folder(os.path.join(target, RESULTS))
    lock = sqlite3.connect(database_path, timeout=sqlite.BUSY_TIMEOUT_S, isolation_level=None)
    source = sqlite3.connect(database_path, isolation_level=None)
    copy = sqlite3.connect(copy_path, isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")  # no writer from now on: the files stay as referred
        locked_at = time.monotonic()
        try:
            source.backup(copy)  # one step: a snapshot
            names = _referenced(copy)
            for name in names:
                _copy_file(os.path.join(source_folder, name), os.path.join(copy_folder, name))
        finally:
            lock.execute("ROLLBACK")
        held = time.monotonic() - locked_at
    finally:
        copy.close()
        source.close()
        lock.close()
    return os.path.getsize(copy_path), len(names), held


def _referenced(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        f"SELECT result FROM {job_results.name} WHERE length(result) <= ?",
        (result_files.LONGEST_REFERENCE,),
    ).fetchall()
    return sorted({name for (blob,) in rows for name in result_files.names_in(blob)})


def _copy_file(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem (or no hard links): a copy of its own
        shutil.copyfile(source, target)
        os.chmod(target, 0o600)
