"""The settings a node runs with, and the questions the rest of the server asks of them.

Plain frozen dataclasses, so that settings compare whole (a live reload applies an edit
only when something changed), cross to the HTTP processes as they are, and read with
their types.  Their defaults are not written here: each comes from the key's declaration
in ``schema`` (a test checks that every declared key has its field here and every
field its key).  What a combination of settings means (a service's own limits, a user's
quota, the timeouts a request may shorten) is answered here, once.
"""

import os
from dataclasses import dataclass, field

from .schema import defaults

_SERVER = {
    **defaults("server"),
    **defaults("database"),
    **defaults("workers"),
    **defaults("log"),
}
_JOBS = defaults("jobs")
_SERVICE = defaults("services.NAME")
_AUTH = defaults("auth")
_USER = defaults("users.NAME")
_CALLBACKS = defaults("callbacks")


@dataclass(frozen=True)
class JobSettings:
    """The [jobs] table, or one service's copy of it with its own values."""

    unfetched_retention_ms: int = _JOBS["unfetched_retention_ms"]
    fetched_retention_ms: int = _JOBS["fetched_retention_ms"]
    queueing_timeout_ms: int = _JOBS["queueing_timeout_ms"]
    computation_timeout_ms: int = _JOBS["computation_timeout_ms"]
    #: the longest timeout a request may ask for (docs/protocol.md §15): past it InvalidValueFault
    max_request_timeout_ms: int = _JOBS["max_request_timeout_ms"]
    max_queued: int = _JOBS["max_queued"]
    max_attempts: int = _JOBS["max_attempts"]
    cleanup_interval_ms: int = _JOBS["cleanup_interval_ms"]
    max_retries: int = _JOBS["max_retries"]  # retries of a transient failure (§11)
    retry_backoff_ms: int = _JOBS["retry_backoff_ms"]  # the first retry's delay; doubled next
    retry_max_delay_ms: int = _JOBS["retry_max_delay_ms"]  # the longest delay between two runs
    #: the bytes one user may keep stored, all services together (docs/protocol.md §15); 0: no limit
    max_stored_bytes: int = _JOBS["max_stored_bytes"]

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

    enabled: bool = _SERVICE["enabled"]
    jobs: JobSettings | None = None  # None: the [jobs] table
    overridden: frozenset = frozenset()  # the JobSettings fields this service sets for itself
    #: the settings the service declares for itself (``Service.setting``) as the file writes
    #: them: name → value; one not written is absent (the author's API adds its default)
    declared: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Quota:
    """A user's limits for one service (0: none)."""

    max_running: int = _USER["max_running"]  # more of the user's jobs wait while others' run
    max_queued: int = _USER["max_queued"]  # past it, the user's starts answer QuotaExceededFault


@dataclass(frozen=True)
class User:
    """One ``[users.NAME]`` table: who the user is, and their shares (docs/protocol.md §10)."""

    name: str
    token_sha256: str  # hex sha256 of the token; the token itself is never stored
    admin: bool = _USER["admin"]
    quota: Quota = Quota()
    services: dict = field(default_factory=dict)  # service → Quota of [users.NAME.services.X]
    max_stored_bytes: int | None = _USER["max_stored_bytes"]  # None: [jobs] max_stored_bytes
    callback_secret: str = _USER["callback_secret"]  # signs the user's callbacks; "": none
    max_held_watches: int | None = _USER["max_held_watches"]  # None: [server]'s
    max_held_watched_ids: int | None = _USER["max_held_watched_ids"]  # None: [server]'s

    def quota_for(self, service: str) -> Quota:
        """The user's quota for ``service``: their own for it, else their general one."""
        return self.services.get(service) or self.quota


@dataclass(frozen=True)
class AuthSettings:
    """The [auth] table."""

    required: bool = _AUTH["required"]  # off: every caller is the anonymous user
    public_wsdl: bool = _AUTH["public_wsdl"]  # ?wsdl answers without credentials


@dataclass(frozen=True)
class CallbackSettings:
    """The [callbacks] table (docs/protocol.md §14)."""

    allowed: tuple = _CALLBACKS["allowed"]  # targets (normalised): URL prefixes, hosts, networks
    secret: str = _CALLBACKS["secret"]  # with accounts off: signs every callback; "": none
    max_attempts: int = _CALLBACKS["max_attempts"]
    retry_delay_ms: int = _CALLBACKS["retry_delay_ms"]  # before the first retry; doubled next
    retry_max_delay_ms: int = _CALLBACKS["retry_max_delay_ms"]
    timeout_ms: int = _CALLBACKS["timeout_ms"]  # one attempt whole: connect, send, the answer
    concurrency: int = _CALLBACKS["concurrency"]  # deliveries of one node at once

    def retry_after_ms(self, attempts: int) -> int:
        """The delay after the ``attempts``-th failed attempt:
        ``min(retry_delay × 2^(attempts-1), retry_max_delay)``."""
        return min(self.retry_delay_ms * 2 ** min(attempts - 1, 40), self.retry_max_delay_ms)


@dataclass(frozen=True)
class Settings:
    """The whole file: [server], [database], [workers] and [log] as plain fields, the
    other tables as their own objects."""

    host: str = _SERVER["host"]
    port: int = _SERVER["port"]
    public_url: str = _SERVER["public_url"]
    threads: int = _SERVER["threads"]  # per HTTP process: for blocking work
    processes: int = _SERVER["processes"]  # HTTP processes; 0: one per core
    max_request_bytes: int = _SERVER["max_request_bytes"]
    max_header_bytes: int = _SERVER["max_header_bytes"]  # request line and headers of one request
    header_timeout_ms: int = _SERVER["header_timeout_ms"]  # first byte to the headers' end
    keep_alive_timeout_ms: int = _SERVER["keep_alive_timeout_ms"]  # idle connection kept
    body_timeout_ms: int = _SERVER["body_timeout_ms"]  # headers' end to the body's end
    max_connections: int = _SERVER["max_connections"]  # per HTTP process
    max_batch: int = _SERVER["max_batch"]  # JSON-RPC requests in one batch
    max_batch_answer_bytes: int = _SERVER["max_batch_answer_bytes"]  # one batch's answer
    max_watched_ids: int = _SERVER["max_watched_ids"]  # ids of one watchJobs
    #: held watchJob/watchJobs calls of one user in one HTTP process (accounts on); 0: no limit
    max_held_watches: int = _SERVER["max_held_watches"]
    #: the ids those calls watch together; 0: no limit
    max_held_watched_ids: int = _SERVER["max_held_watched_ids"]
    allowed_origins: tuple = _SERVER["allowed_origins"]  # other origins whose pages may call
    allowed_hosts: tuple = _SERVER["allowed_hosts"]  # host names served besides addresses
    node_name: str = _SERVER["node_name"]  # in the store; "": hostname:port
    database_url: str = _SERVER["database_url"]  # as written; config.load resolves it
    auto_upgrade: bool = _SERVER["auto_upgrade"]
    min_free_bytes: int = _SERVER["min_free_bytes"]
    workers: int = _SERVER["workers"]
    log_level: str = _SERVER["log_level"]  # [log] level: "debug", "info", "warning", "error"
    log_format: str = _SERVER["log_format"]  # [log] format: "text" or "json" (at a restart)
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
        """Settings holding the services' own declared settings and the log's level
        alone, the rest default: what a worker process needs of them, sent with each run
        (the whole, with a thousand users, is 128 kB to pickle: 3 ms a run)."""
        return Settings(
            log_level=self.log_level,
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
