"""Large results of a SQLite store kept as files beside the database, not in it.

Written into SQLite, a result's every page is copied into the cache, checksummed,
written to the WAL and copied again by the checkpoint (docs/architecture.md, "Decisions
of the implementation", has the figures).  Here the worker's stored form, written once
into a file of the node's spill folder (``engine/spill.py``), which a SQLite node keeps
in this folder, is renamed into ``<database>.results/`` when the job finishes, and
``job_results.result`` holds a reference to it (``REFERENCE`` + the file's name) while
``job_results.bytes`` keeps the result's length (quotas count it as any result).

The rename and the reference are written under the database's write lock, in the
transaction that ends the job; a transaction that fails renames the file back, so that
the write can be tried again.  The file's bytes and its rename are on disk before that
transaction commits (``fsync``; the worker starts writing the file out as it composes
it, so little is left to wait for), so that a power loss
never leaves a finished job whose file is missing or partly written.

Files are never removed by the writes that erase jobs (deleteJob, retention, a parent's
children): ``sweep`` removes the files that no row refers to any more, under the write
lock too, so that no file is ever between its rename and its commit while the folder is
swept.  PostgreSQL keeps every result in the database (its nodes need not share a disk).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: What a ``job_results.result`` that refers to a file starts with; the stored forms
#: (``payload.form``) start with ``x``, ``{`` or ``\0XJP``.
REFERENCE = b"\x00XJF1:"
#: No reference is longer (a job id, an attempt and a few characters); any stored form is.
LONGEST_REFERENCE = 200
#: The suffix of the folder beside the database file.
SUFFIX = ".results"
#: A result file's name ends so (``name_for``); nothing else in the folder is swept.
_EXTENSION = ".result"


def folder_of(database_path: str) -> str:
    """The folder of a SQLite database's result files (``/data/jobs.db.results``)."""
    return os.path.abspath(database_path) + SUFFIX


def make_private_folder(folder: str) -> str:
    """The folder, made if needed, private (0700: it holds users' results)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


@dataclass(frozen=True)
class ResultFile:
    """A stored form written into a file (a worker's spilled result), to be taken in
    by the store as it is."""

    path: str
    length: int


def reference(name: str) -> bytes:
    return REFERENCE + name.encode("ascii")


def name_in(blob: bytes | memoryview) -> str | None:
    """The file a ``job_results.result`` refers to, or None for a result stored in it."""
    if len(blob) > LONGEST_REFERENCE or bytes(blob[: len(REFERENCE)]) != REFERENCE:
        return None
    return bytes(blob[len(REFERENCE) :]).decode("ascii")


def name_for(job_id: str, attempt: int, spilled_path: str) -> str:
    """The name of a job's result file: the job, the attempt that made it, and the
    unique part of the spilled file's name."""
    unique = os.path.basename(spilled_path)[-12:]
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{job_id}-{attempt}-{unique}") + _EXTENSION


def take_in(path: str, folder: str, name: str) -> str:
    """Rename ``path`` into ``folder`` as ``name``, the rename on disk before the
    transaction that refers to it commits (the file's bytes are: ``engine/spill.py``);
    the new path."""
    target = os.path.join(folder, name)
    os.rename(path, target)
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return target


def read(folder: str, name: str, offset: int = 0, size: int | None = None) -> bytes:
    """Bytes of a result file; LookupError when it is gone (its job was erased)."""
    try:
        with open(os.path.join(folder, name), "rb") as f:
            if offset:
                f.seek(offset)
            return f.read() if size is None else f.read(size)
    except FileNotFoundError:
        raise LookupError(f"the result file {name} is gone") from None


def sweep(folder: str, referenced: set[str]) -> int:
    """Remove the result files of ``folder`` that no row refers to (their jobs were
    erased); how many.  The caller holds the database's write lock."""
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.name.endswith(_EXTENSION) and entry.name not in referenced and entry.is_file():
            try:
                os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed
