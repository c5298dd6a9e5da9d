"""The administrator's file (``config/xserver.toml``): keys, defaults and validation.

Every error names its line (``line 12: [jobs] fetched_retention: ...``); a file with
errors is never half applied.  Durations are strings with a unit (``500ms``, ``30s``,
``15m``, ``48h``, ``7d``) or plain numbers of seconds; ``0`` means "none".  Relative
paths are relative to the file's own folder (without a file: to ``config/`` under the
working directory, so the database lands in ``data/`` either way).
"""
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from typing import Optional

from sqlalchemy.engine import make_url

DEFAULT_PATH = os.path.join("config", "xserver.toml")


class ConfigError(Exception):
    """The file is invalid; ``errors`` lists one message per problem, each with its line."""

    def __init__(self, path, errors):
        self.path = path
        self.errors = errors
        super().__init__(f"{path}: " + "; ".join(errors))


@dataclass(frozen=True)
class JobSettings:
    unfetched_retention_ms: int = 48 * 3600_000
    fetched_retention_ms: int = 15 * 60_000
    queueing_timeout_ms: int = 0
    computation_timeout_ms: int = 0
    #: the longest timeout a request may ask for (docs/protocol.md §15): past it InvalidValueFault
    max_request_timeout_ms: int = 7 * 24 * 3600_000
    max_queued: int = 10000
    max_attempts: int = 3
    cleanup_interval_ms: int = 60_000
    max_retries: int = 3                 # retries of a transient failure (docs/protocol.md §11)
    retry_backoff_ms: int = 30_000       # the first retry's delay; doubled for each next one
    retry_max_delay_ms: int = 3600_000   # the longest delay between two runs
    #: the bytes one user may keep stored, all services together (docs/protocol.md §15); 0: no limit
    max_stored_bytes: int = 4 * 1024 ** 3

    def retry_delay_ms(self, retry: int) -> int:
        """The delay before the ``retry``-th retry of a transient failure, without
        its jitter: ``min(retry_backoff × 2^(retry-1), retry_max_delay)``."""
        return min(self.retry_backoff_ms * 2 ** min(retry - 1, 62), self.retry_max_delay_ms)


@dataclass(frozen=True)
class Limits:
    """The timeouts in force for one job: configured ones, shortened by the request's."""
    queueing_timeout_ms: int
    computation_timeout_ms: int


def _shorter(configured: int, asked: Optional[int]) -> int:
    """A request may shorten a timeout, never lengthen it (0 = none)."""
    if not asked or asked <= 0:
        return configured
    return asked if not configured else min(configured, asked)


@dataclass(frozen=True)
class ServiceSettings:
    enabled: bool = True
    jobs: Optional[JobSettings] = None     # None: the [jobs] table
    overridden: frozenset = frozenset()    # the [jobs] keys this service sets for itself


@dataclass(frozen=True)
class Quota:
    """A user's limits for one service (0: none)."""
    max_running: int = 0      # more of the user's jobs wait QUEUING while others' run
    max_queued: int = 0       # past it, the user's start operations answer QuotaExceededFault


@dataclass(frozen=True)
class User:
    """One ``[users.NAME]`` table: who the user is, and their shares (docs/protocol.md §10)."""
    name: str
    token_sha256: str          # hex sha256 of the token; the token itself is never stored
    admin: bool = False
    quota: Quota = Quota()
    services: dict = field(default_factory=dict)     # service → Quota of [users.NAME.services.X]
    max_stored_bytes: Optional[int] = None             # None: [jobs] max_stored_bytes

    def quota_for(self, service: str) -> Quota:
        return self.services.get(service) or self.quota


@dataclass(frozen=True)
class AuthSettings:
    required: bool = False     # off: every caller is the anonymous user, as before accounts
    public_wsdl: bool = True   # ?wsdl answers without credentials


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 50000
    public_url: str = ""
    threads: int = 32          # per HTTP process: the pool for blocking work (store, codecs)
    processes: int = 0         # HTTP processes; 0: one per core
    max_request_bytes: int = 10 * 1024 * 1024
    max_header_bytes: int = 64 * 1024        # request line and headers of one request
    header_timeout_ms: int = 10_000          # from a request's first byte to its headers' end
    max_connections: int = 10_000            # per HTTP process (and as its open files allow)
    max_batch: int = 100                     # JSON-RPC requests in one batch
    max_batch_answer_bytes: int = 16 * 1024 * 1024   # what one batch's answer may hold
    allowed_origins: tuple = ()              # other origins whose pages may call (browser_guard)
    allowed_hosts: tuple = ()                # host names served besides addresses and localhost
    node_name: str = ""                      # the node's name in the store; "": hostname:port
    database_url: str = ""
    workers: int = 2
    jobs: JobSettings = field(default_factory=JobSettings)
    services: dict = field(default_factory=dict)
    auth: AuthSettings = AuthSettings()
    users: dict = field(default_factory=dict)          # name → User
    path: Optional[str] = None

    def http_processes(self) -> int:
        """How many HTTP processes serve the node: ``processes``, or one per core."""
        return self.processes or os.cpu_count() or 1

    def service(self, name: str) -> ServiceSettings:
        return self.services.get(name) or ServiceSettings()

    def jobs_for(self, service: str) -> JobSettings:
        return self.service(service).jobs or self.jobs

    def queue_limit(self, service: str):
        """(max_queued, service or None): a service's own limit counts its own queued
        jobs; the [jobs] limit counts every queued job."""
        own = self.service(service)
        if own.jobs is not None and ("max_queued" in own.overridden
                                     or own.jobs.max_queued != self.jobs.max_queued):
            return own.jobs.max_queued, service
        return self.jobs.max_queued, None

    def service_enabled(self, name: str) -> bool:
        return self.service(name).enabled

    def job_setting_groups(self):
        """[(JobSettings, services or None, excluded services or None)]: the [jobs]
        table for every service without overrides, then each overriding service."""
        overridden = [name for name, s in self.services.items() if s.jobs is not None]
        return ([(self.jobs, None, overridden or None)]
                + [(self.services[name].jobs, [name], None) for name in overridden])

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

    def running_limits(self) -> tuple:
        """((user, service or None, max_running), ...): every configured max_running,
        a user's per-service values before their own; empty when no user has one (the
        claim is then plain first in, first out)."""
        limits = []
        for user in self.users.values():
            own = [(user.name, service, quota.max_running) for service, quota in sorted(user.services.items())
                   if quota.max_running != user.quota.max_running]
            if user.quota.max_running or any(n for _, _, n in own):
                limits.extend(own)
                if user.quota.max_running:
                    limits.append((user.name, None, user.quota.max_running))
        return tuple(limits)

    def limits_for(self, service: str, queueing_ms=None, computation_ms=None) -> Limits:
        jobs = self.jobs_for(service)
        return Limits(_shorter(jobs.queueing_timeout_ms, queueing_ms),
                      _shorter(jobs.computation_timeout_ms, computation_ms))


# ------------------------------------------------------------------------ parsing values

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3600_000, "d": 86400_000, None: 1000}


def parse_duration(value) -> int:
    """A duration as milliseconds; raises ValueError with a reason."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as \"30s\", \"15m\" or \"48h\"")
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not a duration; use e.g. \"30s\", \"15m\", \"48h\"")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        if value > 100 * 365 * 86400:
            raise ValueError("a duration longer than 100 years is not possible")
        return int(round(value * 1000))
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            ms = int(round(float(m.group(1)) * _UNIT_MS[m.group(2)]))
            if ms > 100 * 365 * 86400_000:
                raise ValueError("a duration longer than 100 years is not possible")
            return ms
        if value.strip().startswith("-"):
            raise ValueError("a duration cannot be negative")
    raise ValueError(f"{value!r} is not a duration; use e.g. \"500ms\", \"30s\", \"15m\", \"48h\", \"7d\"")


def _integer(low, high=None):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if value < low or (high is not None and value > high):
            raise ValueError(f"must be between {low} and {high}" if high is not None
                             else f"must be at least {low}")
        return value
    return check


def _string(value):
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _boolean(value):
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _positive_duration(value):
    ms = parse_duration(value)
    if ms <= 0:
        raise ValueError("must be longer than 0")
    return ms


def _origins(value):
    """Origins such as ``https://app.example:8443`` (scheme, host, port; no path), or "*"."""
    return _listed(value, lambda item: item.strip().lower().rstrip("/"),
                   r"https?://[a-z0-9.\-]+(:[0-9]{1,5})?|https?://\[[0-9a-f:.]+\](:[0-9]{1,5})?",
                   "is no origin; write scheme://host[:port] without a path, e.g. "
                   "\"https://app.example\", or \"*\" for every origin")


def _hosts(value):
    """Host names (``.example.org``: that name and every name under it), or "*"."""
    return _listed(value, lambda item: item.strip().lower().rstrip("."),
                   r"\.?[a-z0-9_]([a-z0-9_\-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_\-]*[a-z0-9_])?)*",
                   "is no host name; write a name without scheme or port, e.g. "
                   "\"xr.example.org\", \".example.org\" or \"*\"")


def _listed(value, normal, pattern: str, why: str) -> tuple:
    """A list of strings, each ``normal``-ised and either "*" or matching ``pattern``."""
    items = []
    for item in _strings(value):
        normalised = normal(item)
        if normalised != "*" and not re.fullmatch(pattern, normalised):
            raise ValueError(f"{item!r} {why}")
        items.append(normalised)
    return tuple(items)


def _strings(value) -> list:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return value


def _node_name(value):
    """A name for the node in the store: unique among the nodes of one database."""
    value = _string(value).strip()
    if value and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,199}", value):
        raise ValueError(f"{value!r} is no node name: letters, digits and _ . : @ -, at most 200")
    return value


def _public_url(value):
    value = _string(value)
    if value and not re.match(r"^https?://[^/\s]+", value):
        raise ValueError("must be empty or an http(s) URL such as \"https://host/xr\"")
    return value.rstrip("/")


_JOB_KEYS = {
    "unfetched_retention": ("unfetched_retention_ms", parse_duration),
    "fetched_retention": ("fetched_retention_ms", parse_duration),
    "queueing_timeout": ("queueing_timeout_ms", parse_duration),
    "computation_timeout": ("computation_timeout_ms", parse_duration),
    "max_request_timeout": ("max_request_timeout_ms", _positive_duration),
    "max_queued": ("max_queued", _integer(0)),
    "max_attempts": ("max_attempts", _integer(1)),
    "cleanup_interval": ("cleanup_interval_ms", _positive_duration),
    "max_retries": ("max_retries", _integer(0, 1000)),
    "retry_backoff": ("retry_backoff_ms", parse_duration),
    "retry_max_delay": ("retry_max_delay_ms", parse_duration),
    "max_stored_bytes": ("max_stored_bytes", _integer(0)),
}
#: [jobs] keys that bound a user across services: a [services.NAME] table cannot set them.
_NOT_PER_SERVICE = {"max_stored_bytes": "it bounds what a user stores across all services; "
                                        "set it in [jobs], or for one user in [users.NAME]"}

_TABLES = {
    "server": {
        "host": ("host", _string),
        "port": ("port", _integer(1, 65535)),
        "public_url": ("public_url", _public_url),
        "threads": ("threads", _integer(1, 10000)),
        "processes": ("processes", _integer(0, 256)),
        "max_request_bytes": ("max_request_bytes", _integer(1024)),
        "max_header_bytes": ("max_header_bytes", _integer(1024, 1 << 30)),
        "header_timeout": ("header_timeout_ms", _positive_duration),
        "max_connections": ("max_connections", _integer(16, 10_000_000)),
        "max_batch": ("max_batch", _integer(1, 100000)),
        "max_batch_answer_bytes": ("max_batch_answer_bytes", _integer(1024)),
        "allowed_origins": ("allowed_origins", _origins),
        "allowed_hosts": ("allowed_hosts", _hosts),
        "node_name": ("node_name", _node_name),
    },
    "database": {"url": ("database_url", _string)},
    "workers": {"count": ("workers", _integer(1, 256))},
}

#: Keys a running server cannot change; an edit of them waits for the next restart.
RESTART_KEYS = ("host", "port", "database_url", "workers", "threads", "processes", "node_name")


_AUTH_KEYS = ("required", "public_wsdl")
_QUOTA_KEYS = {"max_running": _integer(0, 100000), "max_queued": _integer(0)}
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")
#: The user name PTV clients send with any user's token (docs/protocol.md §10).
ANY_USER = "xtok"


def _token_sha256(value):
    value = _string(value).strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError("expected the 64 hex digits of the token's sha256 "
                         "(`xruntime token new NAME` prints them)")
    return value


def _users(content: dict, error, known_services) -> dict:
    """The [users.NAME] tables as Users; problems go to ``error(table, key, message)``."""
    users, owners = {}, {}
    for name, table in content.items():
        tname = f"users.{name}"
        if not isinstance(table, dict):
            error(tname, None, "must be a table")
            continue
        if not USER_NAME.match(name):
            error(tname, None, f"{name!r} is no user name: letters, digits and _ . @ -, "
                               "at most 100, starting with a letter or digit")
            continue
        if name == ANY_USER:
            error(tname, None, f"{ANY_USER!r} is the name clients send with any user's token; "
                               "choose another name")
            continue
        fields, quota, services = {}, {}, {}
        for key, value in table.items():
            try:
                if key == "token_sha256":
                    fields["token_sha256"] = _token_sha256(value)
                elif key == "admin":
                    fields["admin"] = _boolean(value)
                elif key in _QUOTA_KEYS:
                    quota[key] = _QUOTA_KEYS[key](value)
                elif key == "max_stored_bytes":
                    fields["max_stored_bytes"] = _integer(0)(value)
                elif key == "services" and isinstance(value, dict):
                    services = value
                else:
                    error(tname, key, "unknown key (known: token_sha256, admin, max_running, "
                                      "max_queued, max_stored_bytes, and [users.NAME.services.SERVICE] "
                                      "tables)")
            except ValueError as exc:
                error(tname, key, str(exc))
        if "token_sha256" not in table:
            error(tname, None, "token_sha256 is missing (`xruntime token new NAME` prints it)")
        elif "token_sha256" in fields and owners.setdefault(fields["token_sha256"], name) != name:
            error(tname, "token_sha256", f"the same token as [users.{owners[fields['token_sha256']]}]: "
                                         "a token names one user")
        base = Quota(**quota)
        own = {}
        for service, overrides in services.items():
            sname = f"{tname}.services.{service}"
            if known_services is not None and service not in known_services:
                error(sname, None, f"no service named {service!r} (known: {', '.join(known_services)})")
                continue
            if not isinstance(overrides, dict):
                error(sname, None, "must be a table")
                continue
            values = {}
            for key, value in overrides.items():
                if key in _NOT_PER_SERVICE:
                    error(sname, key, f"not per service: {_NOT_PER_SERVICE[key]}")
                    continue
                if key not in _QUOTA_KEYS:
                    error(sname, key, f"unknown key (known: {', '.join(_QUOTA_KEYS)})")
                    continue
                try:
                    values[key] = _QUOTA_KEYS[key](value)
                except ValueError as exc:
                    error(sname, key, str(exc))
            own[service] = replace(base, **values)
        if "token_sha256" in fields:
            users[name] = User(name=name, quota=base, services=own, **fields)
    return users


# ------------------------------------------------------------------------ line numbers

def _dotted(name: str) -> list:
    return [part.strip().strip('"').strip("'") for part in name.split(".")]


def _key_lines(text: str) -> dict:
    """(table, key) → line number, from a plain scan of the file.  Knows table headers,
    dotted keys (``jobs.max_queued = 1``) and one-line inline tables
    (``XDemo = { max_queued = 1 }``); lines inside multi-line strings are skipped."""
    lines, table, in_string = {}, "", None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if in_string:
            if in_string in stripped:
                in_string = None
            continue
        header = re.match(r"^\[\s*([^\[\]]+?)\s*\]", stripped)
        if header:
            table = ".".join(_dotted(header.group(1)))
            lines.setdefault((table, None), number)
            continue
        key = re.match(r'^((?:"[^"]*"|[A-Za-z0-9_\-]+)(?:\s*\.\s*(?:"[^"]*"|[A-Za-z0-9_\-]+))*)\s*=\s*(.*)$',
                       stripped)
        if not key:
            continue
        parts = _dotted(key.group(1))
        scope = ".".join(filter(None, [table] + parts[:-1]))
        lines.setdefault((scope, parts[-1]), number)
        lines.setdefault((".".join(filter(None, [table] + parts)), None), number)
        value = key.group(2)
        for quote in ('"""', "'''"):
            if value.startswith(quote) and value.count(quote) == 1:
                in_string = quote
        if value.startswith("{"):
            inner = ".".join(filter(None, [table] + parts))
            for name in re.findall(r'(?:^|[{,])\s*("?[A-Za-z0-9_\-]+"?)\s*=', value):
                lines.setdefault((inner, name.strip('"')), number)
    return lines


# ------------------------------------------------------------------------ loading

def load(path: Optional[str] = None, known_services=None) -> Settings:
    """The settings of ``path`` (or of ``config/xserver.toml`` when present, else the
    defaults).  Raises ConfigError listing every problem with its line."""
    if path is None and os.path.exists(DEFAULT_PATH):
        path = DEFAULT_PATH
    if path is None:
        return _finish(Settings(), os.path.abspath("config"))
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError(path, [f"cannot read the file: {exc.strerror}"])
    return parse(raw.decode("utf-8", errors="replace"), path, known_services)


def parse(text: str, path: str = "<config>", known_services=None) -> Settings:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"line {m.group(1)}" if m else "line ?"
        raise ConfigError(path, [f"{where}: not valid TOML: {re.sub(r' [(]at line.*', '', str(exc))}"])
    lines = _key_lines(text)
    errors = []

    def line_of(table, key=None):
        return lines.get((table, key)) or lines.get((table, None)) or 1

    def error(table, key, message):
        name = f"[{table}] {key}" if key else f"[{table}]"
        errors.append(f"line {line_of(table, key)}: {name}: {message}")

    values = {}
    for table, content in data.items():
        if table in _TABLES or table == "jobs":
            if not isinstance(content, dict):
                errors.append(f"line {line_of('', table)}: {table} must be a table [{table}]")
                continue
            keys = _TABLES.get(table) or _JOB_KEYS
            target = values if table != "jobs" else values.setdefault("jobs", {})
            for key, value in content.items():
                if key not in keys:
                    error(table, key, f"unknown key (known: {', '.join(keys)})")
                    continue
                attr, check = keys[key]
                try:
                    target[attr] = check(value)
                except ValueError as exc:
                    error(table, key, str(exc))
        elif table == "services":
            if not isinstance(content, dict):
                errors.append(f"line {line_of('', table)}: services must hold [services.NAME] tables")
                continue
            services = values.setdefault("services", {})
            for name, table_values in content.items():
                tname = f"services.{name}"
                if known_services is not None and name not in known_services:
                    error(tname, None, f"no service named {name!r} (known: {', '.join(known_services)})")
                    continue
                if not isinstance(table_values, dict):
                    error(tname, None, "must be a table")
                    continue
                enabled, jobs = True, {}
                for key, value in table_values.items():
                    try:
                        if key == "enabled":
                            enabled = _boolean(value)
                        elif key in _NOT_PER_SERVICE:
                            error(tname, key, f"not per service: {_NOT_PER_SERVICE[key]}")
                        elif key in _JOB_KEYS:
                            attr, check = _JOB_KEYS[key]
                            jobs[attr] = check(value)
                        else:
                            error(tname, key, "unknown key (known: enabled, "
                                  + ", ".join(k for k in _JOB_KEYS if k not in _NOT_PER_SERVICE) + ")")
                    except ValueError as exc:
                        error(tname, key, str(exc))
                services[name] = (enabled, jobs)
        elif table == "auth":
            if not isinstance(content, dict):
                errors.append(f"line {line_of('', table)}: auth must be a table [auth]")
                continue
            auth = {}
            for key, value in content.items():
                if key not in _AUTH_KEYS:
                    error(table, key, f"unknown key (known: {', '.join(_AUTH_KEYS)})")
                    continue
                try:
                    auth[key] = _boolean(value)
                except ValueError as exc:
                    error(table, key, str(exc))
            values["auth"] = AuthSettings(**auth)
        elif table == "users":
            if not isinstance(content, dict):
                errors.append(f"line {line_of('', table)}: users must hold [users.NAME] tables")
                continue
            values["users"] = _users(content, error, known_services)
        else:
            errors.append(f"line {line_of(table) if (table, None) in lines else line_of('', table)}: "
                          f"unknown table or key {table!r} "
                          "(known: server, database, workers, jobs, services, auth, users)")
    if errors:
        raise ConfigError(path, errors)
    jobs = JobSettings(**values.pop("jobs", {}))
    services = {name: ServiceSettings(enabled, replace(jobs, **overrides) if overrides else None,
                                      frozenset(overrides))
                for name, (enabled, overrides) in values.pop("services", {}).items()}
    settings = Settings(jobs=jobs, services=services, path=os.path.abspath(path), **values)
    return _finish(settings, os.path.dirname(os.path.abspath(path)))


def _finish(settings: Settings, base_dir: str) -> Settings:
    """Resolve the database URL against the file's folder."""
    url = settings.database_url or "sqlite:///../data/xruntime.db"
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:" \
            and not os.path.isabs(parsed.database):
        url = str(parsed.set(database=os.path.normpath(os.path.join(base_dir, parsed.database))))
    return replace(settings, database_url=url)


def with_overrides(settings: Settings, host=None, port=None) -> Settings:
    """Command-line flags override the file."""
    changes = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    return replace(settings, **changes) if changes else settings
