"""The settings a node runs with: each key of the administrator's file declared once, on
the field it fills, and the questions the rest of the server asks of the settings.

Plain frozen dataclasses, so that settings compare whole (a live reload applies an edit
only when something changed), cross to the HTTP processes as they are, and read with
their types.  A field that a key of the file fills is declared with ``key``: its default
as the file writes it, its kind of value (with its bounds, ``values``), its meaning, and
when it is not plain, its table, its name in the file, whether a running node applies an
edit of it, the tables that refuse it.  Everything else is derived from these fields:
``schema`` lists the tables and their keys, ``config`` checks a file against them, and
``docs`` writes the documentation's key table.  What a combination of settings means (a
service's own limits, a user's quota, the timeouts a request may shorten) is answered
here, once.
"""

import os
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
    TomlValue,
    Value,
    choice,
    duration,
    integer,
)

#: the field metadata that holds a field's key
KEY = "key"
_SERVICE = "services.NAME"
_USER_SERVICE = "users.NAME.services.SERVICE"

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


def key(
    default: TomlValue | None,
    kind: Kind[Value],
    doc: str,
    *,
    table: str = "",
    name: str = "",
    **more: Any,
) -> Value:
    """A field filled by the key of the file declared here.  ``default`` is written as in
    the file (None: no plain one, and with ``missing`` the field is required); ``table`` is
    where the key is written when not in the first table ``schema`` names the class for;
    ``name`` is its name in the file when that is not the field's name without ``_ms`` (a
    duration's field, ``retry_backoff_ms``, holds milliseconds).  ``more``: the rest of
    ``Key`` (``live``, ``section``, ``refused``, ``default_doc``, ``missing``, ``unique``);
    ``schema`` completes the declaration with the field's name and the key's tables."""
    declared = Key(name, kind, default, (table,) if table else (), doc, **more)
    if declared.missing:
        return field(metadata={KEY: declared})
    value: Any = declared.default_value()
    return field(default=value, metadata={KEY: declared})


@dataclass(frozen=True)
class JobSettings:
    """The [jobs] table, or one service's copy of it with its own values."""

    unfetched_retention_ms: int = key(
        "48h",
        duration(),
        "a finished job nobody fetched is erased this long after it finished; `0`: kept for ever",
        section="§5",
    )
    fetched_retention_ms: int = key(
        "15m",
        duration(),
        "a fetched job is erased this long after its first fetch; `0`: kept for ever",
        section="§5",
    )
    queueing_timeout_ms: int = key(
        "0",
        duration(),
        "a job queued longer fails with `RequestTimedOutFault`; `0`: no limit",
        section="§5",
    )
    computation_timeout_ms: int = key(
        "0",
        duration(),
        "a job running longer is stopped (intermediate result, or `RequestTimedOutFault`); "
        "`0`: no limit",
        section="§5",
    )
    max_request_timeout_ms: int = key(
        "7d",
        duration(positive=True),
        "the longest `timeouts.queueingTimeout` / `computationTimeout` a request may ask "
        "for; past it `InvalidValueFault` naming the field",
        section="§15",
    )
    max_queued: int = key(
        10_000,
        integer(0),
        "queued jobs at most; past it, start operations answer `QueueOverflowFault`; "
        "`0`: no limit. A service's own value counts that service's queued jobs alone",
        section="§5",
    )
    max_attempts: int = key(
        3,
        integer(1),
        "runs of a job whose node died under it before it fails with `InternalErrorFault`",
        section="§5",
    )
    cleanup_interval_ms: int = key(
        "60s", duration(positive=True), "how often expired jobs are erased"
    )
    max_retries: int = key(
        3,
        integer(0, 1000),
        "runs again of a job that failed with a `TransientFault` or asked `RetryLater`; "
        "then it fails",
        section="§11",
    )
    retry_backoff_ms: int = key(
        "30s",
        duration(),
        "delay before the first retry of a `TransientFault`, doubled for each next one (±10 %)",
        section="§11",
    )
    retry_max_delay_ms: int = key(
        "1h", duration(), "the longest delay before a retry", section="§11"
    )
    max_stored_bytes: int = key(
        4 * 1024**3,
        integer(0),
        "bytes one user's jobs not yet erased may keep stored (requests, results, faults, "
        "progress, callbacks waiting; all services together; with accounts off, the "
        "anonymous user's: the whole node's), each unfinished job counted with the largest "
        "result its service bounds its request to; a start that could pass it answers "
        "`QuotaExceededFault`, and a result that would pass it fails its job with that "
        "fault instead of being stored; `0`: no limit",
        section="§15",
        refused={_SERVICE: NOT_PER_SERVICE},
    )

    def retry_delay_ms(self, retry: int) -> int:
        """The delay before the ``retry``-th retry of a transient failure, without
        its jitter: ``min(retry_backoff × 2^(retry-1), retry_max_delay)``."""
        return min(self.retry_backoff_ms * 2 ** min(retry - 1, 62), self.retry_max_delay_ms)


@dataclass(frozen=True)
class Limits:
    """The timeouts in force for one job: configured ones, shortened by the request's."""

    queueing_timeout_ms: int
    computation_timeout_ms: int


def _shorter(configured: int, asked: int | None) -> int:
    """A request may shorten a timeout, never lengthen it (0 = none)."""
    if not asked or asked <= 0:
        return configured
    return asked if not configured else min(configured, asked)


@dataclass(frozen=True)
class ServiceSettings:
    """One [services.NAME] table."""

    enabled: bool = key(
        True,
        BOOLEAN,
        "`false`: the service is not served (`ServiceNotConfiguredFault`, its WSDL answers 404)",
        section="§7",
    )
    jobs: JobSettings | None = None  # None: the [jobs] table
    overridden: frozenset = frozenset()  # the JobSettings fields this service sets for itself
    #: the settings the service declares for itself (``Service.setting``) as the file writes
    #: them: name → value; one not written is absent (the author's API adds its default)
    declared: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Quota:
    """A user's limits for one service (0: none)."""

    max_running: int = key(
        0,
        integer(0, 100_000),
        "per service: at most this many of the user's jobs run at once, on all nodes "
        "together; `0`: no limit",
        section="§10",
    )
    max_queued: int = key(
        0,
        integer(0),
        "per service: past this many queued, the user's starts answer `QuotaExceededFault`; "
        "`0`: no limit",
        section="§10",
    )


@dataclass(frozen=True)
class User:
    """One ``[users.NAME]`` table: who the user is, and their shares (docs/protocol.md §10)."""

    name: str
    token_sha256: str = key(
        None,
        TOKEN_SHA256,
        "sha256 of the user's token, hex (`xruntime token new NAME` prints it)",
        default_doc="(required)",
        section="§10",
        missing="token_sha256 is missing (`xruntime token new NAME` prints it)",
        unique="the same token as [{other}]: a token names one user",
    )
    admin: bool = key(False, BOOLEAN, "sees and manages every user's jobs", section="§10")
    quota: Quota = Quota()  # its keys are written in [users.NAME] itself
    services: dict = field(default_factory=dict)  # service → Quota of [users.NAME.services.X]
    max_stored_bytes: int | None = key(
        None,
        integer(0),
        "the user's own bound on stored bytes, all services together; `0`: no limit",
        default_doc="`[jobs] max_stored_bytes`",
        refused={_USER_SERVICE: NOT_PER_SERVICE},
        section="§15",
    )
    max_held_watches: int | None = key(
        None,
        integer(0, 10_000_000),
        "the user's own bound on their held `watchJob`/`watchJobs` calls in one HTTP "
        "process; `0`: no limit",
        default_doc="`[server] max_held_watches`",
        refused={_USER_SERVICE: NOT_PER_SERVICE_WATCHES},
        section="§14",
    )
    max_held_watched_ids: int | None = key(
        None,
        integer(0, 1_000_000_000),
        "the user's own bound on the job ids their held watches watch together in one HTTP "
        "process; `0`: no limit",
        default_doc="`[server] max_held_watched_ids`",
        refused={_USER_SERVICE: NOT_PER_SERVICE_WATCHES},
        section="§14",
    )
    callback_secret: str = key(
        "",
        WEBHOOK_SECRET,
        "the secret the user's callbacks are signed with (`whsec_…`; `xruntime token "
        "new-secret` prints one); empty: a start with a callback answers `InvalidValueFault`",
        section="§14",
    )

    def quota_for(self, service: str) -> Quota:
        """The user's quota for ``service``: their own for it, else their general one."""
        return self.services.get(service) or self.quota


@dataclass(frozen=True)
class AuthSettings:
    """The [auth] table."""

    required: bool = key(
        False,
        BOOLEAN,
        "`true`: every call needs a user's token (HTTP Basic or Bearer)",
        section="§10",
    )
    public_wsdl: bool = key(
        True,
        BOOLEAN,
        "`?wsdl` answers without credentials, so clients can be generated",
        section="§10",
    )


@dataclass(frozen=True)
class CallbackSettings:
    """The [callbacks] table (docs/protocol.md §14)."""

    allowed: tuple = key(
        [],
        CALLBACK_TARGETS,
        'where callbacks may go: URL prefixes (`"https://hooks.example.org/xr/"`), host '
        'names (`".example.org"`: every name under it), IP addresses or networks; loopback, '
        "private and link-local addresses only when an address or network listed holds them. "
        "`[]`: callbacks are refused",
        section="§14",
    )
    secret: str = key(
        "",
        WEBHOOK_SECRET,
        "with accounts off, the secret callbacks are signed with (`whsec_…`); empty: a "
        "start with a callback answers `InvalidValueFault`",
        section="§14",
    )
    max_attempts: int = key(
        12,
        integer(1, 1000),
        "attempts to deliver one callback (the first and its retries); then it is given up "
        "and the job's events say so",
        section="§14",
    )
    retry_delay_ms: int = key(
        "5s",
        duration(positive=True),
        "delay before a callback's first retry, doubled for each next one",
        section="§14",
    )
    retry_max_delay_ms: int = key(
        "1h",
        duration(positive=True),
        "the longest delay between two attempts of a callback",
        section="§14",
    )
    timeout_ms: int = key(
        "10s",
        duration(positive=True),
        "one attempt of a callback, whole: connecting to the receiver, sending, and its "
        "whole answer; past it the attempt failed (issue 32: a receiver answering a byte at a "
        "time is cut)",
        section="§14",
    )
    concurrency: int = key(
        16,
        integer(1, 1000),
        "callbacks one node delivers at once (a slow receiver holds one of them); one "
        "user, and one target (host:port), at most a quarter of them at once (at least one)",
        section="§14",
    )

    def retry_after_ms(self, attempts: int) -> int:
        """The delay after the ``attempts``-th failed attempt:
        ``min(retry_delay × 2^(attempts-1), retry_max_delay)``."""
        return min(self.retry_delay_ms * 2 ** min(attempts - 1, 40), self.retry_max_delay_ms)


@dataclass(frozen=True)
class Settings:
    """The whole file: [server], [database], [workers] and [log] as plain fields, the
    other tables as their own objects."""

    host: str = key(
        "127.0.0.1", STRING, 'address to listen on; `"0.0.0.0"` for every interface', live=False
    )
    port: int = key(50000, integer(1, 65535), "HTTP port of every binding", live=False)
    node_name: str = key(
        "",
        NODE_NAME,
        "the node's name in the database (how a restarted node finds its jobs); empty: "
        "`hostname:port`. Hosts or containers that share a hostname need one each",
        live=False,
    )
    public_url: str = key(
        "",
        PUBLIC_URL,
        "base URL written into the WSDL's `soap:address` and the OGC API's links "
        "(e.g. `https://host/xr`); empty: the address the client used",
    )
    processes: int = key(
        0, integer(0, 256), "HTTP processes serving every binding; `0`: one per core", live=False
    )
    threads: int = key(
        32,
        integer(1, 10000),
        "per HTTP process, the threads for blocking work (database, large payloads); "
        "a held `watchJob` takes none",
        live=False,
    )
    max_request_bytes: int = key(
        10 * 1024 * 1024,
        integer(1024),
        "largest request body accepted; it also bounds parsing: a body denser in containers "
        "than one per 16 bytes (JSON) or 12 (XML) is refused before it is parsed, and an "
        "HTTP process parses at most this many bytes of large bodies at once (no key of "
        "their own)",
        section="§15",
    )
    max_header_bytes: int = key(
        64 * 1024,
        integer(1024, 1 << 30),
        "request line and headers of one request; past it HTTP 431 and the connection is closed",
        section="§15",
    )
    header_timeout_ms: int = key(
        "10s",
        duration(positive=True),
        "from a request's first byte to the end of its headers (and from a new connection "
        "to its first request); past it HTTP 408 and closed",
        section="§15",
    )
    keep_alive_timeout_ms: int = key(
        "75s",
        duration(positive=True),
        "an idle keep-alive connection is closed after this long (for connections opened "
        "after an edit); keep it above a proxy's idle timeout in front, so that the proxy "
        "never reuses a connection the node is closing",
        section="§15",
    )
    body_timeout_ms: int = key(
        "60s",
        duration(positive=True),
        "from the end of a request's headers to the end of its body; past it HTTP 408 and closed",
        section="§15",
    )
    max_connections: int = key(
        10_000,
        integer(16, 10_000_000),
        "connections per HTTP process (at most its open-file limit); past it a new "
        "connection closes the one that has waited longest for its headers, or is "
        "answered 503 when every one is serving a request",
        section="§15",
    )
    max_batch: int = key(
        100,
        integer(1, 100_000),
        "JSON-RPC requests in one batch; a larger batch is refused whole "
        "(`-32600`, `InvalidRequestFault`)",
        section="§15",
    )
    max_batch_answer_bytes: int = key(
        16 * 1024 * 1024,
        integer(1024),
        "bytes one JSON-RPC batch's answer may hold; each item past it answers `-32001` "
        "(`RejectedRequestFault`): fetch a large result on its own",
        section="§15",
    )
    max_watched_ids: int = key(
        1000,
        integer(1, 10_000),
        "job ids one `watchJobs` may watch; more are refused "
        '(`InvalidValueFault { parameter: "ids" }`)',
        section="§14",
    )
    max_held_watches: int = key(
        1000,
        integer(0, 10_000_000),
        "`watchJob` and `watchJobs` calls one user may hold at once in one HTTP process "
        "(with accounts on; a user's own in `[users.NAME]`); past it the user's next watch "
        "answers `QuotaExceededFault` at once, until one of theirs ends; `0`: no limit",
        section="§14",
    )
    max_held_watched_ids: int = key(
        100_000,
        integer(0, 1_000_000_000),
        "job ids the held watches of one user watch together in one HTTP process (a "
        "`watchJob` counts 1, a `watchJobs` its distinct ids; with accounts on; a user's own "
        "in `[users.NAME]`); past it `QuotaExceededFault` at once; `0`: no limit",
        section="§14",
    )
    allowed_origins: tuple = key(
        [],
        ORIGINS,
        'origins (`"https://app.example"`, or `"*"`) whose web pages may call the '
        "node; a request from another page's origin is refused (403, `AccessDeniedFault`)",
        section="§15",
    )
    allowed_hosts: tuple = key(
        [],
        HOSTS,
        "host names served besides IP addresses, `localhost` and this machine's name "
        '(`".example.org"`: every name under it; `"*"`: any); another `Host` is '
        "refused (`InvalidRequestFault`), against DNS rebinding. `[]` with accounts on: "
        "any name",
        section="§15",
    )
    #: as written; config.load resolves it against the file's folder
    database_url: str = key(
        "sqlite:///../data/xruntime.db",
        DATABASE_URL,
        "`data/` beside `config/`; `postgresql+psycopg://user@host/db` for several nodes",
        table="database",
        name="url",
        live=False,
    )
    auto_upgrade: bool = key(
        True,
        BOOLEAN,
        "a node brings a database behind its schema up to date when it starts; `false`: "
        "it refuses to start, and `xruntime db upgrade` does it (docs/operations.md, "
        "Upgrading)",
        table="database",
        live=False,
    )
    min_free_bytes: int = key(
        268_435_456,
        integer(0),
        "a SQLite node refuses starts (`TemporarilyUnavailableFault`) while its "
        "database's disk has less room than this, and `/readyz` answers 503; `0`: no floor "
        "(PostgreSQL's disk is not measured)",
        table="database",
        section="§15",
    )
    workers: int = key(
        2,
        integer(1, 256),
        "worker processes of this node; each runs one job at a time",
        table="workers",
        name="count",
        live=False,
    )
    kept_memory_bytes: int = key(
        268_435_456,
        integer(0),
        "memory a worker process keeps, of what its jobs free, for its next job: a large "
        "result's arrays then land on pages the process has, not on new ones (a 3 000² "
        "matrix computes about a third faster); past it, the rest goes back after the "
        "job; `0`: freed memory goes back at once (glibc's C library only, which every "
        "Linux but Alpine has)",
        table="workers",
    )
    log_level: str = key(
        "info",
        choice("debug", "info", "warning", "error"),
        "the least severe lines written, in every process of the node; "
        '`"warning"`: warnings and errors alone',
        table="log",
        name="level",
    )
    log_format: str = key(
        "text",
        choice("text", "json"),
        '`"text"`: `time LEVEL logger[pid]: message`; `"json"`: one JSON object a line '
        "(`time`, `level`, `logger`, `process`, `message`, `exc`, `job`), for journald, "
        'Loki or ELK (docs/operations.md, "The log")',
        table="log",
        name="format",
        live=False,
    )
    jobs: JobSettings = field(default_factory=JobSettings)
    services: dict = field(default_factory=dict)  # name → ServiceSettings
    auth: AuthSettings = AuthSettings()
    users: dict = field(default_factory=dict)  # name → User
    callbacks: CallbackSettings = CallbackSettings()
    path: str | None = None  # the file read, absolute; None: no file

    def http_processes(self) -> int:
        """How many HTTP processes serve the node: ``processes``, or one per core."""
        return self.processes or os.cpu_count() or 1

    def service(self, name: str) -> ServiceSettings:
        """The [services.NAME] table of ``name`` (the defaults when it has none)."""
        return self.services.get(name) or ServiceSettings()

    def services_own(self) -> "Settings":
        """Settings holding the services' own declared settings, the log's level and the
        memory a worker keeps alone, the rest default: what a worker process needs of
        them, sent with each run (the whole, with a thousand users, is 128 kB to pickle:
        3 ms a run)."""
        return Settings(
            log_level=self.log_level,
            kept_memory_bytes=self.kept_memory_bytes,
            services={
                name: ServiceSettings(declared=own.declared)
                for name, own in self.services.items()
                if own.declared
            },
        )

    def jobs_for(self, service: str) -> JobSettings:
        """The job settings of ``service``: its own, else the [jobs] table."""
        return self.service(service).jobs or self.jobs

    def queue_limit(self, service: str) -> tuple[int, str | None]:
        """(max_queued, service or None): a service's own limit counts its own queued
        jobs; the [jobs] limit counts every queued job."""
        own = self.service(service)
        if own.jobs is not None and (
            "max_queued" in own.overridden or own.jobs.max_queued != self.jobs.max_queued
        ):
            return own.jobs.max_queued, service
        return self.jobs.max_queued, None

    def service_enabled(self, name: str) -> bool:
        """Whether ``name`` is served."""
        return self.service(name).enabled

    def job_setting_groups(self) -> list[tuple[JobSettings, list | None, list | None]]:
        """[(JobSettings, services or None, excluded services or None)]: the [jobs]
        table for every service without overrides, then each overriding service."""
        overridden = [name for name, s in self.services.items() if s.jobs is not None]
        return [(self.jobs, None, overridden or None)] + [
            (self.services[name].jobs, [name], None) for name in overridden
        ]

    def quota_of(self, user: str, service: str) -> Quota:
        """The user's quota for the service (none for the anonymous or a removed user)."""
        found = self.users.get(user)
        return found.quota_for(service) if found is not None else Quota()

    def stored_bytes_limit(self, user: str) -> int:
        """The bytes ``user`` may keep stored (0: no limit): their own value, else the
        [jobs] one (every user's, the anonymous one's too)."""
        found = self.users.get(user)
        if found is not None and found.max_stored_bytes is not None:
            return found.max_stored_bytes
        return self.jobs.max_stored_bytes

    def held_watch_limits(self, user: str) -> tuple[int, int]:
        """(held watch calls, ids they watch together) ``user`` may hold at once in one
        HTTP process (0: no limit): their own values, else [server]'s.  With accounts off
        every caller is the anonymous user, the node's only one: none applies (the
        process's ``max_connections`` bounds its calls)."""
        if not self.auth.required:
            return 0, 0
        found = self.users.get(user)
        calls = found.max_held_watches if found is not None else None
        ids = found.max_held_watched_ids if found is not None else None
        return (
            self.max_held_watches if calls is None else calls,
            self.max_held_watched_ids if ids is None else ids,
        )

    def running_limits(self) -> tuple:
        """((user, service or None, max_running), ...): every configured max_running,
        a user's per-service values before their own; empty when no user has one (the
        claim is then plain first in, first out)."""
        limits = []
        for user in self.users.values():
            own = [
                (user.name, service, quota.max_running)
                for service, quota in sorted(user.services.items())
                if quota.max_running != user.quota.max_running
            ]
            if user.quota.max_running or any(n for _, _, n in own):
                limits.extend(own)
                if user.quota.max_running:
                    limits.append((user.name, None, user.quota.max_running))
        return tuple(limits)

    def callback_secret(self, user: str) -> tuple[str, str]:
        """(the secret ``user``'s callbacks are signed with or "", the key that holds
        it): with accounts on the user's own, with accounts off the node's."""
        if not self.auth.required:
            return self.callbacks.secret, "[callbacks] secret"
        found = self.users.get(user)
        return (found.callback_secret if found else ""), f"[users.{user}] callback_secret"

    def limits_for(
        self, service: str, queueing_ms: int | None = None, computation_ms: int | None = None
    ) -> Limits:
        """The timeouts of a job of ``service`` whose request asked for these."""
        jobs = self.jobs_for(service)
        return Limits(
            _shorter(jobs.queueing_timeout_ms, queueing_ms),
            _shorter(jobs.computation_timeout_ms, computation_ms),
        )
