"""Every table and key of the administrator's file, declared once.

Each ``Key`` says what the file may hold and what it means: its kind of value (with its
bounds), its default as written in ``config/xserver.toml``, the settings field it fills,
the tables it may be written in (and those that refuse it, with the reason), whether a
running node applies an edit of it, and one line for the documentation.  Everything else
reads these declarations: the parser (``config``) checks a file against them, the
settings' dataclasses (``model``) take their defaults from them, and the key
tables of the README and docs/protocol.md are generated from them (``docs``), a
test failing when a table drifts.  Before, a key's default lived in the dataclass, in the
shipped file and in the README, and the README had lost keys on the way.

A table path with an upper-case part (``services.NAME``) is a family: one table per name.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .values import (
    BOOLEAN,
    CALLBACK_TARGETS,
    DATABASE_URL,
    HOSTS,
    NODE_NAME,
    ORIGINS,
    PUBLIC_URL,
    STRING,
    TOKEN_SHA256,
    WEBHOOK_SECRET,
    Kind,
    NameRule,
    TomlValue,
    choice,
    duration,
    integer,
    service_name,
    user_name,
)

#: written where a key may not be set per service, since it bounds a user across all of them
NOT_PER_SERVICE = (
    "not per service: it bounds what a user stores across all services; "
    "set it in [jobs], or for one user in [users.NAME]"
)

#: written where a held-watch bound is set per service: a watch is of no one service
NOT_PER_SERVICE_WATCHES = (
    "not per service: it bounds a user's held watches, whatever jobs they watch; "
    "set it in [server], or for one user in [users.NAME]"
)


@dataclass(frozen=True)
class Key:
    """One key of the file."""

    name: str  # as written in the file
    kind: Kind
    default: TomlValue | None  # as written in the file; None: see default_doc
    tables: tuple[str, ...]  # where it may be written; the first is its home
    doc: str  # its meaning, one line of the documentation table
    attr: str = ""  # the settings field it fills; "": its name
    live: bool = True  # a running node applies an edit of it (else: at restart)
    refused: Mapping[str, str] = field(default_factory=dict)  # table → why not there
    default_doc: str = ""  # the documented default when it is no plain value
    missing: str = ""  # required: the error when a table lacks it
    unique: str = ""  # one value per table of the family: the error of a repeat
    section: str = ""  # where docs/protocol.md states its rules, e.g. "§5"

    @property
    def setting(self) -> str:
        """The settings field this key fills."""
        return self.attr or self.name

    @property
    def home(self) -> str:
        """The table that documents it; the others override it there."""
        return self.tables[0]

    def default_value(self) -> object:
        """The default as the settings hold it (None when it has no plain default)."""
        return None if self.default is None else self.kind.check(self.default)


@dataclass(frozen=True)
class Table:
    """One table of the file (or a family of them: ``users.NAME``)."""

    path: str
    doc: str
    names: NameRule | None = None  # a family: checks each table's NAME
    override_default: str = ""  # a table whose keys override their home's: the
    override_doc: str = ""  # documented default and meaning of such a key

    @property
    def family(self) -> bool:
        """One table per name (``services.NAME``), not a single table."""
        return self.names is not None


_SERVICE = "services.NAME"
_USER_SERVICE = "users.NAME.services.SERVICE"

TABLES: tuple[Table, ...] = (
    Table("server", "how the node serves HTTP"),
    Table("database", "where the jobs are stored"),
    Table("workers", "the processes that run jobs"),
    Table("log", "what the node's processes write to stderr, and in which form"),
    Table("jobs", "retention, timeouts, queue bounds and retries, for every service"),
    Table(
        _SERVICE,
        "one service's own settings",
        names=service_name,
        override_default="the `[jobs]` value",
        override_doc="that setting for this service alone",
    ),
    Table("auth", "accounts"),
    Table("users.NAME", "one user: their token, rights and shares", names=user_name),
    Table(
        _USER_SERVICE,
        "one user's shares of one service",
        names=service_name,
        override_default="the user's",
        override_doc="the user's value for one service",
    ),
    Table("callbacks", "where completion callbacks may go, how they are signed and retried"),
)

_JOBS = ("jobs", _SERVICE)
_QUOTA = ("users.NAME", _USER_SERVICE)

KEYS: tuple[Key, ...] = (
    # [server]
    Key(
        "host",
        STRING,
        "127.0.0.1",
        ("server",),
        live=False,
        doc='address to listen on; `"0.0.0.0"` for every interface',
    ),
    Key(
        "port", integer(1, 65535), 50000, ("server",), live=False, doc="HTTP port of every binding"
    ),
    Key(
        "node_name",
        NODE_NAME,
        "",
        ("server",),
        live=False,
        doc="the node's name in the database (how a restarted node finds its jobs); empty: "
        "`hostname:port`. Hosts or containers that share a hostname need one each",
    ),
    Key(
        "public_url",
        PUBLIC_URL,
        "",
        ("server",),
        doc="base URL written into the WSDL's `soap:address` and the OGC API's links "
        "(e.g. `https://host/xr`); empty: the address the client used",
    ),
    Key(
        "processes",
        integer(0, 256),
        0,
        ("server",),
        live=False,
        doc="HTTP processes serving every binding; `0`: one per core",
    ),
    Key(
        "threads",
        integer(1, 10000),
        32,
        ("server",),
        live=False,
        doc="per HTTP process, the threads for blocking work (database, large payloads); "
        "a held `watchJob` takes none",
    ),
    Key(
        "max_request_bytes",
        integer(1024),
        10 * 1024 * 1024,
        ("server",),
        section="§15",
        doc="largest request body accepted; it also bounds parsing: a body denser in containers "
        "than one per 16 bytes (JSON) or 12 (XML) is refused before it is parsed, and an "
        "HTTP process parses at most this many bytes of large bodies at once (no key of "
        "their own)",
    ),
    Key(
        "max_header_bytes",
        integer(1024, 1 << 30),
        64 * 1024,
        ("server",),
        section="§15",
        doc="request line and headers of one request; past it HTTP 431 and the connection "
        "is closed",
    ),
    Key(
        "header_timeout",
        duration(positive=True),
        "10s",
        ("server",),
        attr="header_timeout_ms",
        section="§15",
        doc="from a request's first byte to the end of its headers (and from a new connection "
        "to its first request); past it HTTP 408 and closed",
    ),
    Key(
        "keep_alive_timeout",
        duration(positive=True),
        "75s",
        ("server",),
        attr="keep_alive_timeout_ms",
        section="§15",
        doc="an idle keep-alive connection is closed after this long (for connections opened "
        "after an edit); keep it above a proxy's idle timeout in front, so that the proxy "
        "never reuses a connection the node is closing",
    ),
    Key(
        "body_timeout",
        duration(positive=True),
        "60s",
        ("server",),
        attr="body_timeout_ms",
        section="§15",
        doc="from the end of a request's headers to the end of its body; past it HTTP 408 "
        "and closed",
    ),
    Key(
        "max_connections",
        integer(16, 10_000_000),
        10_000,
        ("server",),
        section="§15",
        doc="connections per HTTP process (at most its open-file limit); past it a new "
        "connection closes the one that has waited longest for its headers, or is "
        "answered 503 when every one is serving a request",
    ),
    Key(
        "max_batch",
        integer(1, 100_000),
        100,
        ("server",),
        section="§15",
        doc="JSON-RPC requests in one batch; a larger batch is refused whole "
        "(`-32600`, `InvalidRequestFault`)",
    ),
    Key(
        "max_batch_answer_bytes",
        integer(1024),
        16 * 1024 * 1024,
        ("server",),
        section="§15",
        doc="bytes one JSON-RPC batch's answer may hold; each item past it answers `-32001` "
        "(`RejectedRequestFault`): fetch a large result on its own",
    ),
    Key(
        "max_watched_ids",
        integer(1, 10_000),
        1000,
        ("server",),
        section="§14",
        doc="job ids one `watchJobs` may watch; more are refused "
        '(`InvalidValueFault { parameter: "ids" }`)',
    ),
    Key(
        "max_held_watches",
        integer(0, 10_000_000),
        1000,
        ("server",),
        section="§14",
        doc="`watchJob` and `watchJobs` calls one user may hold at once in one HTTP process "
        "(with accounts on; a user's own in `[users.NAME]`); past it the user's next watch "
        "answers `QuotaExceededFault` at once, until one of theirs ends; `0`: no limit",
    ),
    Key(
        "max_held_watched_ids",
        integer(0, 1_000_000_000),
        100_000,
        ("server",),
        section="§14",
        doc="job ids the held watches of one user watch together in one HTTP process (a "
        "`watchJob` counts 1, a `watchJobs` its distinct ids; with accounts on; a user's own in "
        "`[users.NAME]`); past it `QuotaExceededFault` at once; `0`: no limit",
    ),
    Key(
        "allowed_origins",
        ORIGINS,
        [],
        ("server",),
        section="§15",
        doc='origins (`"https://app.example"`, or `"*"`) whose web pages may call the '
        "node; a request from another page's origin is refused (403, `AccessDeniedFault`)",
    ),
    Key(
        "allowed_hosts",
        HOSTS,
        [],
        ("server",),
        section="§15",
        doc="host names served besides IP addresses, `localhost` and this machine's name "
        '(`".example.org"`: every name under it; `"*"`: any); another `Host` is '
        "refused (`InvalidRequestFault`), against DNS rebinding. `[]` with accounts on: "
        "any name",
    ),
    # [database], [workers]
    Key(
        "url",
        DATABASE_URL,
        "sqlite:///../data/xruntime.db",
        ("database",),
        attr="database_url",
        live=False,
        doc="`data/` beside `config/`; `postgresql+psycopg://user@host/db` for several nodes",
    ),
    Key(
        "auto_upgrade",
        BOOLEAN,
        True,
        ("database",),
        live=False,
        doc="a node brings a database behind its schema up to date when it starts; `false`: "
        "it refuses to start, and `xruntime db upgrade` does it (docs/operations.md, "
        "Upgrading)",
    ),
    Key(
        "min_free_bytes",
        integer(0),
        268_435_456,
        ("database",),
        section="§15",
        doc="a SQLite node refuses starts (`TemporarilyUnavailableFault`) while its "
        "database's disk has less room than this, and `/readyz` answers 503; `0`: no floor "
        "(PostgreSQL's disk is not measured)",
    ),
    Key(
        "count",
        integer(1, 256),
        2,
        ("workers",),
        attr="workers",
        live=False,
        doc="worker processes of this node; each runs one job at a time",
    ),
    # [log]
    Key(
        "level",
        choice("debug", "info", "warning", "error"),
        "info",
        ("log",),
        attr="log_level",
        doc="the least severe lines written, in every process of the node; "
        '`"warning"`: warnings and errors alone',
    ),
    Key(
        "format",
        choice("text", "json"),
        "text",
        ("log",),
        attr="log_format",
        live=False,
        doc='`"text"`: `time LEVEL logger[pid]: message`; `"json"`: one JSON object a line '
        "(`time`, `level`, `logger`, `process`, `message`, `exc`, `job`), for journald, "
        'Loki or ELK (docs/operations.md, "The log")',
    ),
    # [jobs], and each [services.NAME] for itself
    Key(
        "unfetched_retention",
        duration(),
        "48h",
        _JOBS,
        attr="unfetched_retention_ms",
        section="§5",
        doc="a finished job nobody fetched is erased this long after it finished; "
        "`0`: kept for ever",
    ),
    Key(
        "fetched_retention",
        duration(),
        "15m",
        _JOBS,
        attr="fetched_retention_ms",
        section="§5",
        doc="a fetched job is erased this long after its first fetch; `0`: kept for ever",
    ),
    Key(
        "queueing_timeout",
        duration(),
        "0",
        _JOBS,
        attr="queueing_timeout_ms",
        section="§5",
        doc="a job queued longer fails with `RequestTimedOutFault`; `0`: no limit",
    ),
    Key(
        "computation_timeout",
        duration(),
        "0",
        _JOBS,
        attr="computation_timeout_ms",
        section="§5",
        doc="a job running longer is stopped (intermediate result, or `RequestTimedOutFault`); "
        "`0`: no limit",
    ),
    Key(
        "max_request_timeout",
        duration(positive=True),
        "7d",
        _JOBS,
        attr="max_request_timeout_ms",
        section="§15",
        doc="the longest `timeouts.queueingTimeout` / `computationTimeout` a request may ask "
        "for; past it `InvalidValueFault` naming the field",
    ),
    Key(
        "max_queued",
        integer(0),
        10_000,
        _JOBS,
        section="§5",
        doc="queued jobs at most; past it, start operations answer `QueueOverflowFault`; "
        "`0`: no limit. A service's own value counts that service's queued jobs alone",
    ),
    Key(
        "max_attempts",
        integer(1),
        3,
        _JOBS,
        section="§5",
        doc="runs of a job whose node died under it before it fails with `InternalErrorFault`",
    ),
    Key(
        "cleanup_interval",
        duration(positive=True),
        "60s",
        _JOBS,
        attr="cleanup_interval_ms",
        doc="how often expired jobs are erased",
    ),
    Key(
        "max_retries",
        integer(0, 1000),
        3,
        _JOBS,
        section="§11",
        doc="runs again of a job that failed with a `TransientFault` or asked `RetryLater`; "
        "then it fails",
    ),
    Key(
        "retry_backoff",
        duration(),
        "30s",
        _JOBS,
        attr="retry_backoff_ms",
        section="§11",
        doc="delay before the first retry of a `TransientFault`, doubled for each next one (±10 %)",
    ),
    Key(
        "retry_max_delay",
        duration(),
        "1h",
        _JOBS,
        attr="retry_max_delay_ms",
        section="§11",
        doc="the longest delay before a retry",
    ),
    Key(
        "max_stored_bytes",
        integer(0),
        4 * 1024**3,
        ("jobs",),
        section="§15",
        refused={_SERVICE: NOT_PER_SERVICE},
        doc="bytes one user's jobs not yet erased may keep stored (requests, results, faults, "
        "progress, callbacks waiting; all services together; with accounts off, the "
        "anonymous user's: the whole node's), each unfinished job counted with the largest "
        "result its service bounds its request to; a start that could pass it answers "
        "`QuotaExceededFault`, and a result that would pass it fails its job with that "
        "fault instead of being stored; `0`: no limit",
    ),
    # [services.NAME]
    Key(
        "enabled",
        BOOLEAN,
        True,
        (_SERVICE,),
        section="§7",
        doc="`false`: the service is not served (`ServiceNotConfiguredFault`, its WSDL "
        "answers 404)",
    ),
    # [auth]
    Key(
        "required",
        BOOLEAN,
        False,
        ("auth",),
        section="§10",
        doc="`true`: every call needs a user's token (HTTP Basic or Bearer)",
    ),
    Key(
        "public_wsdl",
        BOOLEAN,
        True,
        ("auth",),
        section="§10",
        doc="`?wsdl` answers without credentials, so clients can be generated",
    ),
    # [users.NAME], and their [users.NAME.services.SERVICE] for one service
    Key(
        "token_sha256",
        TOKEN_SHA256,
        None,
        ("users.NAME",),
        default_doc="(required)",
        section="§10",
        missing="token_sha256 is missing (`xruntime token new NAME` prints it)",
        unique="the same token as [{other}]: a token names one user",
        doc="sha256 of the user's token, hex (`xruntime token new NAME` prints it)",
    ),
    Key(
        "admin",
        BOOLEAN,
        False,
        ("users.NAME",),
        section="§10",
        doc="sees and manages every user's jobs",
    ),
    Key(
        "max_running",
        integer(0, 100_000),
        0,
        _QUOTA,
        section="§10",
        doc="per service: at most this many of the user's jobs run at once, on all nodes "
        "together; `0`: no limit",
    ),
    Key(
        "max_queued",
        integer(0),
        0,
        _QUOTA,
        section="§10",
        doc="per service: past this many queued, the user's starts answer `QuotaExceededFault`; "
        "`0`: no limit",
    ),
    Key(
        "max_stored_bytes",
        integer(0),
        None,
        ("users.NAME",),
        default_doc="`[jobs] max_stored_bytes`",
        refused={_USER_SERVICE: NOT_PER_SERVICE},
        section="§15",
        doc="the user's own bound on stored bytes, all services together; `0`: no limit",
    ),
    Key(
        "max_held_watches",
        integer(0, 10_000_000),
        None,
        ("users.NAME",),
        default_doc="`[server] max_held_watches`",
        refused={_USER_SERVICE: NOT_PER_SERVICE_WATCHES},
        section="§14",
        doc="the user's own bound on their held `watchJob`/`watchJobs` calls in one HTTP "
        "process; `0`: no limit",
    ),
    Key(
        "max_held_watched_ids",
        integer(0, 1_000_000_000),
        None,
        ("users.NAME",),
        default_doc="`[server] max_held_watched_ids`",
        refused={_USER_SERVICE: NOT_PER_SERVICE_WATCHES},
        section="§14",
        doc="the user's own bound on the job ids their held watches watch together in one HTTP "
        "process; `0`: no limit",
    ),
    Key(
        "callback_secret",
        WEBHOOK_SECRET,
        "",
        ("users.NAME",),
        section="§14",
        doc="the secret the user's callbacks are signed with (`whsec_…`; `xruntime token "
        "new-secret` prints one); empty: a start with a callback answers `InvalidValueFault`",
    ),
    # [callbacks]
    Key(
        "allowed",
        CALLBACK_TARGETS,
        [],
        ("callbacks",),
        section="§14",
        doc='where callbacks may go: URL prefixes (`"https://hooks.example.org/xr/"`), host '
        'names (`".example.org"`: every name under it), IP addresses or networks; loopback, '
        "private and link-local addresses only when an address or network listed holds them. "
        "`[]`: callbacks are refused",
    ),
    Key(
        "secret",
        WEBHOOK_SECRET,
        "",
        ("callbacks",),
        section="§14",
        doc="with accounts off, the secret callbacks are signed with (`whsec_…`); empty: a "
        "start with a callback answers `InvalidValueFault`",
    ),
    Key(
        "max_attempts",
        integer(1, 1000),
        12,
        ("callbacks",),
        section="§14",
        doc="attempts to deliver one callback (the first and its retries); then it is given up "
        "and the job's events say so",
    ),
    Key(
        "retry_delay",
        duration(positive=True),
        "5s",
        ("callbacks",),
        attr="retry_delay_ms",
        section="§14",
        doc="delay before a callback's first retry, doubled for each next one",
    ),
    Key(
        "retry_max_delay",
        duration(positive=True),
        "1h",
        ("callbacks",),
        attr="retry_max_delay_ms",
        section="§14",
        doc="the longest delay between two attempts of a callback",
    ),
    Key(
        "timeout",
        duration(positive=True),
        "10s",
        ("callbacks",),
        attr="timeout_ms",
        section="§14",
        doc="one attempt of a callback, whole: connecting to the receiver, sending, and its "
        "whole answer; past it the attempt failed (issue 32: a receiver answering a byte at a "
        "time is cut)",
    ),
    Key(
        "concurrency",
        integer(1, 1000),
        16,
        ("callbacks",),
        section="§14",
        doc="callbacks one node delivers at once (a slow receiver holds one of them); one "
        "user, and one target (host:port), at most a quarter of them at once (at least one)",
    ),
)


# ------------------------------------------------------------------------ looking up


def table(path: str) -> Table:
    """The table declared at ``path`` (``"services.NAME"`` for a family)."""
    for declared in TABLES:
        if declared.path == path:
            return declared
    raise KeyError(path)


def keys_of(path: str) -> dict[str, Key]:
    """name → Key: the keys a table may hold, its own first, then those it overrides."""
    held = [key for key in KEYS if path in key.tables]
    return {key.name: key for key in sorted(held, key=lambda key: key.home != path)}


def refusals_of(path: str) -> dict[str, str]:
    """name → why: keys of other tables that this table refuses."""
    return {key.name: key.refused[path] for key in KEYS if path in key.refused}


def children_of(path: str) -> dict[str, Table]:
    """The tables nested right under ``path`` ("" for the file's top), by the name they
    are written under: ``services`` for ``services.NAME``, ``server`` for ``server``."""
    depth = len(path.split(".")) if path else 0
    children = {}
    for declared in TABLES:
        parts = declared.path.split(".")
        if ".".join(parts[:depth]) == path and len(parts) == depth + 1 + declared.family:
            children[parts[depth]] = declared
    return children


def defaults(path: str) -> dict[str, Any]:
    """field → default value, for the keys whose home is ``path``."""
    return {key.setting: key.default_value() for key in KEYS if key.home == path}


#: Settings fields a running server cannot change; an edit of them waits for the next restart.
RESTART_FIELDS: tuple[str, ...] = tuple(key.setting for key in KEYS if not key.live)
