"""The tables of the administrator's file, and their keys as the settings declare them.

Each table names the settings class whose fields its keys fill (``model``, where each
key is declared once, with ``key``); ``KEYS`` is read from those fields, completed with
the field's name and the tables a key may be written in: its home, and the tables that
take a class's keys to override them (``[services.NAME]`` takes ``[jobs]``'s for one
service) unless the key refuses them.  The parser (``config``) checks a file against
these, and the documentation's key tables (``docs``) are generated from them.

A table path with an upper-case part (``services.NAME``) is a family: one table per name.
"""

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import Field, dataclass, fields, is_dataclass, replace

from .model import (
    KEY,
    AuthSettings,
    CallbackSettings,
    JobSettings,
    Key,
    Quota,
    ServiceSettings,
    Settings,
    User,
)
from .values import NameRule, service_name, user_name

__all__ = [
    "KEYS",
    "RESTART_FIELDS",
    "ServiceKeys",
    "TABLES",
    "Key",
    "FileTable",
    "children_of",
    "keys_of",
    "refusals_of",
]

#: service name → the keys it declares for its own ``[services.NAME]`` table (the registry
#: hands them over: this layer knows no service)
ServiceKeys = Mapping[str, Sequence[Key]]


@dataclass(frozen=True)
class FileTable:
    """One table of the file (or a family of them: ``users.NAME``)."""

    path: str
    doc: str
    model: type | None = None  # the settings class whose keys it declares (with ``key``)
    names: NameRule | None = None  # a family: checks each table's NAME
    takes: type | None = None  # the class whose keys it may override, for one name
    override_default: str = ""  # with ``takes``: the documented default and meaning
    override_doc: str = ""  # of such a key

    @property
    def family(self) -> bool:
        """One table per name (``services.NAME``), not a single table."""
        return self.names is not None


TABLES: tuple[FileTable, ...] = (
    FileTable("server", "how the node serves HTTP", Settings),
    FileTable("database", "where the jobs are stored", Settings),
    FileTable("workers", "the processes that run jobs", Settings),
    FileTable("log", "what the node's processes write to stderr, and in which form", Settings),
    FileTable(
        "jobs", "retention, timeouts, queue bounds and retries, for every service", JobSettings
    ),
    FileTable(
        "services.NAME",
        "one service's own settings",
        ServiceSettings,
        names=service_name,
        takes=JobSettings,
        override_default="the `[jobs]` value",
        override_doc="that setting for this service alone",
    ),
    FileTable("auth", "accounts", AuthSettings),
    FileTable("users.NAME", "one user: their token, rights and shares", User, names=user_name),
    FileTable(
        "users.NAME.services.SERVICE",
        "one user's shares of one service",
        names=service_name,
        takes=Quota,
        override_default="the user's",
        override_doc="the user's value for one service",
    ),
    FileTable(
        "callbacks",
        "where completion callbacks may go, how they are signed and retried",
        CallbackSettings,
    ),
)

#: settings class → its first table: where its keys are written unless they say otherwise
_HOMES = {table.model: table.path for table in reversed(TABLES) if table.model is not None}


def _fields(model: type, home: str, path: str) -> Iterator[tuple[type, Field]]:
    """(class, field) for each field of ``model`` whose key is written in ``path``, in
    their order; a field holding a class of keys no table declares (``User.quota``) has
    its keys written in its holder's table, in its place."""
    for found in fields(model):
        declared = found.metadata.get(KEY)
        if declared is not None:
            if (declared.tables or (home,))[0] == path:
                yield model, found
        elif isinstance(found.type, type) and is_dataclass(found.type) and found.type not in _HOMES:
            yield from _fields(found.type, home, path)


def _key(owner: type, found: Field, home: str) -> Key:
    """The key declared on ``found``, with its field, its name and its tables."""
    declared: Key = found.metadata[KEY]
    takers = [t.path for t in TABLES if t.takes is owner and t.path not in declared.refused]
    return replace(
        declared,
        name=declared.name or found.name.removesuffix("_ms"),
        attr=found.name,
        tables=(home, *takers),
    )


KEYS: tuple[Key, ...] = tuple(
    _key(owner, found, declared.path)
    for declared in TABLES
    if declared.model is not None
    for owner, found in _fields(declared.model, _HOMES[declared.model], declared.path)
)


# ------------------------------------------------------------------------ looking up


def keys_of(path: str) -> dict[str, Key]:
    """name → Key: the keys a table may hold, its own first, then those it overrides."""
    held = [key for key in KEYS if path in key.tables]
    return {key.name: key for key in sorted(held, key=lambda key: key.home != path)}


def refusals_of(path: str) -> dict[str, str]:
    """name → why: keys of other tables that this table refuses."""
    return {key.name: key.refused[path] for key in KEYS if path in key.refused}


def children_of(path: str) -> dict[str, FileTable]:
    """The tables nested right under ``path`` ("" for the file's top), by the name they
    are written under: ``services`` for ``services.NAME``, ``server`` for ``server``."""
    depth = len(path.split(".")) if path else 0
    children = {}
    for declared in TABLES:
        parts = declared.path.split(".")
        if ".".join(parts[:depth]) == path and len(parts) == depth + 1 + declared.family:
            children[parts[depth]] = declared
    return children


#: Settings fields a running server cannot change; an edit of them waits for the next restart.
RESTART_FIELDS: tuple[str, ...] = tuple(key.setting for key in KEYS if not key.live)
