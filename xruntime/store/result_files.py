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

A parent job's result joined from its children's (``payload.list_join``) may be made of
their files' pieces without copying them: its row then refers to *spans*
(``SPANS`` + JSON ``[[name, offset, length], ...]``), ranges of result files end to end
(its own small file: the head and the tail of its form; its children's: their
pieces), read as one result.  A child's file is then referred to by two rows, and
stays while either does.

Files are never removed by the writes that erase jobs (deleteJob, retention, a parent's
children): ``sweep`` sets aside the files that no row refers to any more, under the write
lock too, so that no file is ever between its rename and its commit while the folder is
swept, and ``remove_swept`` removes them once the lock is given back.  Setting aside is a
rename, instant; removing a file frees its blocks, which takes the disk as long as a
write of it (ext4: ~9 ms for 36 MB, 17 ms for 72 MB), and under the lock every write of
every node sharing the database (a start, a claim, a job's end) waited for it.  A file
set aside is no result file any more (``_SET_ASIDE``): no row can come to refer to it, a
parent's join finds it gone (``check_named``), and any process may remove it, at any
time (a node that stopped in between leaves it for the next sweep).  PostgreSQL keeps
every result in the database (its nodes need not share a disk).
"""

from __future__ import annotations

import json
import mmap
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

#: What a ``job_results.result`` that refers to a file starts with; the stored forms
#: (``payload.form``) start with ``x``, ``{`` or ``\0XJP``.
REFERENCE = b"\x00XJF1:"
#: What one that refers to spans of files (a parent's joined result) starts with.
SPANS = b"\x00XJF2:"
#: No reference is longer (a file's name is a job id, an attempt and a few characters; a
#: parent's spans are made so that theirs fits: ``fits``); any stored form kept in a row
#: of ``job_results`` is (``schema.RESULT_ROW_ABOVE``, 64 KiB).
LONGEST_REFERENCE = 32 * 1024
#: The suffix of the folder beside the database file.
SUFFIX = ".results"
#: A result file's name ends so (``name_for``); nothing else in the folder is swept.
_EXTENSION = ".result"
#: What a swept file's name gets at its end: set aside, to be removed outside the lock.
_SET_ASIDE = ".swept"


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


@dataclass(frozen=True)
class Span:
    """``length`` bytes from ``offset`` of the result file ``name`` (None: of the file
    not taken in yet, the spilled one that comes with them: ``ComposedFile``)."""

    name: str | None
    offset: int
    length: int


@dataclass(frozen=True)
class Located:
    """A result kept in result files, as its spans end to end: what a parent's worker
    is given of a child's result (``FinishedChild.result``), to map rather than copy."""

    folder: str
    spans: tuple[Span, ...]

    @property
    def length(self) -> int:
        return sum(span.length for span in self.spans)

    def spans_of(self, offset: int, length: int) -> list[Span]:
        """The spans of the files that hold ``length`` bytes from ``offset`` of the result."""
        found, start = [], 0
        for span in self.spans:
            low, high = max(offset, start), min(offset + length, start + span.length)
            if low < high:
                found.append(Span(span.name, span.offset + low - start, high - low))
            start += span.length
        return found

    def mapped(self) -> bytes | memoryview:
        """The result's bytes: its file mapped, not read, when it is one span (a
        child's, in its parent's worker: the pages are the page cache's, shared), else
        read; LookupError when a file is gone."""
        if len(self.spans) != 1:
            return self.read()
        span = self.spans[0]
        try:
            with open(os.path.join(self.folder, cast(str, span.name)), "rb") as f:
                whole = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise LookupError(f"the result file {span.name} is gone") from None
        return memoryview(whole)[span.offset : span.offset + span.length]

    def read(self, offset: int = 0, size: int | None = None) -> bytes:
        """``size`` bytes from ``offset`` (to the end: None); LookupError when a file
        is gone."""
        size = self.length - offset if size is None else size
        return b"".join(
            read(self.folder, cast(str, s.name), s.offset, s.length)
            for s in self.spans_of(offset, size)
        )


@dataclass(frozen=True)
class ComposedFile:
    """A result made of ``spans``: those named, of files already taken in (a parent's
    children's), and those of no name, of the spilled file at ``path`` (its own bytes),
    which the store takes in as ``ResultFile``'s."""

    path: str
    spans: tuple[Span, ...]

    @property
    def length(self) -> int:
        return sum(span.length for span in self.spans)


def stored_length(stored: bytes | bytearray | memoryview | ResultFile | ComposedFile) -> int:
    """How many bytes a result's stored form takes, in memory or as a file: what the
    store counts of it against its owner's ``max_stored_bytes``."""
    return stored.length if isinstance(stored, (ResultFile, ComposedFile)) else len(stored)


def reference(name: str) -> bytes:
    return REFERENCE + name.encode("ascii")


def spans_reference(spans: Iterable[Span]) -> bytes:
    """The reference to a result made of ``spans`` (named), end to end."""
    listed = [[s.name, s.offset, s.length] for s in spans]
    return SPANS + json.dumps(listed, separators=(",", ":")).encode("ascii")


def fits(spans: Iterable[Span]) -> bool:
    """Whether a reference to ``spans`` is short enough to be told from a stored form
    (``LONGEST_REFERENCE``); a result of more spans is written whole instead."""
    return len(spans_reference(spans)) <= LONGEST_REFERENCE


def name_in(blob: bytes | memoryview) -> str | None:
    """The file a ``job_results.result`` refers to whole, or None for a result stored
    in it (or made of spans: ``spans_in``)."""
    if len(blob) > LONGEST_REFERENCE or bytes(blob[: len(REFERENCE)]) != REFERENCE:
        return None
    return bytes(blob[len(REFERENCE) :]).decode("ascii")


def spans_in(blob: bytes | memoryview, folder: str) -> tuple[Span, ...] | None:
    """The spans of the files a ``job_results.result`` refers to (one file: the whole
    of it, its length read from the folder), or None for a result stored in it."""
    name = name_in(blob)
    if name is not None:
        try:
            return (Span(name, 0, os.path.getsize(os.path.join(folder, name))),)
        except FileNotFoundError:
            raise LookupError(f"the result file {name} is gone") from None
    if len(blob) > LONGEST_REFERENCE or bytes(blob[: len(SPANS)]) != SPANS:
        return None
    return tuple(Span(*listed) for listed in json.loads(bytes(blob[len(SPANS) :])))


def names_in(blob: bytes | memoryview) -> list[str]:
    """Every file a ``job_results.result`` refers to ([] for a result stored in it)."""
    name = name_in(blob)
    if name is not None:
        return [name]
    if len(blob) > LONGEST_REFERENCE or bytes(blob[: len(SPANS)]) != SPANS:
        return []
    return [listed[0] for listed in json.loads(bytes(blob[len(SPANS) :]))]


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


def check_named(folder: str, spans: Iterable[Span]) -> None:
    """LookupError unless every file ``spans`` name is in ``folder``."""
    for name in {span.name for span in spans if span.name is not None}:
        if not os.path.isfile(os.path.join(folder, name)):
            raise LookupError(f"the result file {name} is gone")


def read(folder: str, name: str, offset: int = 0, size: int | None = None) -> bytes:
    """Bytes of a result file; LookupError when it is gone (its job was erased)."""
    try:
        with open(os.path.join(folder, name), "rb") as f:
            if offset:
                f.seek(offset)
            return f.read() if size is None else f.read(size)
    except FileNotFoundError:
        raise LookupError(f"the result file {name} is gone") from None


def sweep(folder: str, referenced: set[str]) -> tuple[int, list[str]]:
    """Set aside (``_SET_ASIDE``: a rename) the result files of ``folder`` that no row
    refers to (their jobs were erased): how many, and the paths of every file set aside
    there (those, and any a node stopped before removing), for ``remove_swept``.  The
    caller holds the database's write lock; ``remove_swept`` runs once it has given the
    lock back."""
    swept, set_aside = 0, []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0, []
    for entry in entries:
        if not entry.is_file():
            continue
        if entry.name.endswith(_EXTENSION + _SET_ASIDE):
            set_aside.append(entry.path)
        elif entry.name.endswith(_EXTENSION) and entry.name not in referenced:
            try:
                os.rename(entry.path, entry.path + _SET_ASIDE)
            except FileNotFoundError:  # (another node's sweep took it)
                continue
            swept += 1
            set_aside.append(entry.path + _SET_ASIDE)
    return swept, set_aside


def remove_swept(paths: Iterable[str]) -> None:
    """Remove the files ``sweep`` set aside; without the write lock: no row refers to
    any."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:  # (another node's removed it)
            pass
