"""The administrator's file (``config/xserver.toml``): reading it into ``Settings``.

The public face of the configuration: ``load`` and ``parse`` check a file against the
tables and keys of ``schema`` (each key's kind, default and where it may be written, as
``model`` declares it) with one walk over the file's tables, and build the settings of
``model`` from what passed.  Every error names its line (``line 12: [jobs]
fetched_retention: ...``, found by ``lines``); a file with errors is never half
applied.  Durations are strings with a unit (``500ms``, ``30s``, ``15m``, ``48h``,
``7d``; a number without one is refused); ``0`` means "none".  Relative paths are relative to
the file's own folder (without a file: to ``config/`` under the working directory, so
the database lands in ``data/`` either way).
"""

import os
import tomllib
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

from sqlalchemy.engine import make_url

from .lines import KeyLines, toml_error
from .model import (
    AuthSettings,
    CallbackSettings,
    JobSettings,
    Limits,
    Quota,
    ServiceSettings,
    Settings,
    User,
)
from .schema import (
    RESTART_FIELDS,
    FileTable,
    Key,
    ServiceKeys,
    children_of,
    keys_of,
    refusals_of,
)
from .values import ANY_USER, USER_NAME, parse_duration

__all__ = [
    "ANY_USER",
    "DEFAULT_PATH",
    "LIVE_FIELDS",
    "RESTART_KEYS",
    "USER_NAME",
    "AuthSettings",
    "CallbackSettings",
    "ConfigError",
    "JobSettings",
    "Limits",
    "Quota",
    "ServiceKeys",
    "ServiceSettings",
    "Settings",
    "User",
    "load",
    "parse",
    "parse_duration",
    "with_overrides",
]

DEFAULT_PATH = os.path.join("config", "xserver.toml")

#: Settings fields a running server cannot change; an edit of them waits for the next restart.
RESTART_KEYS: tuple[str, ...] = RESTART_FIELDS
#: Settings fields a running server takes from a valid edit at once.
LIVE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(Settings) if f.name not in RESTART_KEYS and f.name != "path"
)


class ConfigError(Exception):
    """The file is invalid; ``errors`` lists one message per problem, each with its line."""

    def __init__(self, path: str, errors: list[str]) -> None:
        self.path = path
        self.errors = errors
        super().__init__(f"{path}: " + "; ".join(errors))


def load(
    path: str | None = None,
    known_services: Sequence[str] | None = None,
    service_keys: ServiceKeys | None = None,
) -> Settings:
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
        raise ConfigError(path, [f"cannot read the file: {exc.strerror}"]) from exc
    return parse(raw.decode("utf-8", errors="replace"), path, known_services, service_keys)


def parse(
    text: str,
    path: str = "<config>",
    known_services: Sequence[str] | None = None,
    service_keys: ServiceKeys | None = None,
) -> Settings:
    """The settings written in ``text``; ``known_services`` (None: any) are the names a
    ``[services.NAME]`` table may have, ``service_keys`` the keys each of them declares
    besides the file's own.  Raises ConfigError listing every problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, [toml_error(exc)]) from exc
    reader = _Reader(KeyLines(text), known_services, service_keys or {})
    checked = reader.table("", "", data)
    if reader.errors:
        raise ConfigError(path, reader.errors)
    where = os.path.abspath(path)
    return _finish(_settings(checked, where), os.path.dirname(where))


def with_overrides(
    settings: Settings, host: str | None = None, port: int | None = None
) -> Settings:
    """Command-line flags override the file."""
    changes: dict[str, Any] = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    return replace(settings, **changes) if changes else settings


# ------------------------------------------------------------------------ checking


class _Reader:
    """One walk over the file's tables, checking each against its declaration and
    collecting every error with its line."""

    def __init__(
        self, lines: KeyLines, known_services: Sequence[str] | None, service_keys: ServiceKeys
    ) -> None:
        self.lines = lines
        self.known_services = known_services
        self.service_keys = service_keys
        self.errors: list[str] = []
        self.owners: dict[tuple[str, object], str] = {}  # (key, value) → table, for unique keys

    def error(self, where: str, key: str | None, message: str) -> None:
        """``line N: [where] key: message`` (``[where]: message`` for the table itself)."""
        name = f"[{where}] {key}" if key else f"[{where}]"
        self.errors.append(f"line {self.lines.of(where, key)}: {name}: {message}")

    def error_at_top(self, name: str, message: str) -> None:
        """``line N: message`` about ``name`` written at the file's top, outside any table."""
        self.errors.append(f"line {self.lines.of(name)}: {message}")

    def table(self, pattern: str, where: str, content: dict, declared: Sequence[Key] = ()) -> dict:
        """The checked values of one table: setting → value, and for each nested table
        its name → its own checked values (a family's: member name → values); the keys
        a service ``declared`` for its table go, checked, under ``declared``."""
        keys, refused, children = keys_of(pattern), refusals_of(pattern), children_of(pattern)
        own = {key.name: key for key in declared if key.name not in keys}
        checked: dict = {}
        for name, value in content.items():
            if name in keys:
                self.key(keys[name], where, value, checked)
            elif name in own:
                self.key(own[name], where, value, checked.setdefault("declared", {}))
            elif name in refused:
                self.error(where, name, refused[name])
            elif name in children:
                nested = self.nested(children[name], where, name, value)
                if nested is not None:
                    checked[name] = nested
            elif not where:
                self.error_at_top(
                    name, f"unknown table or key {name!r} (known: {', '.join(children)})"
                )
            else:
                known = (
                    list(keys)
                    + list(own)
                    + [f"and [{child.path}] tables" for child in children.values()]
                )
                self.error(where, name, f"unknown key (known: {', '.join(known)})")
        for key in keys.values():
            if key.missing and key.name not in content:
                self.error(where, None, key.missing)
        return checked

    def key(self, key: Key, where: str, value: object, checked: dict) -> None:
        """Check one key's value into ``checked``."""
        try:
            checked[key.setting] = key.kind.check(value)
        except ValueError as exc:
            self.error(where, key.name, str(exc))
            return
        if key.unique:
            owner = self.owners.setdefault((key.name, checked[key.setting]), where)
            if owner != where:
                self.error(where, key.name, key.unique.format(other=owner))

    def nested(self, declared: FileTable, where: str, name: str, value: object) -> dict | None:
        """The checked values of the table(s) written under ``name`` in ``where``."""
        inside = f"{where}.{name}" if where else name
        name_rule = declared.names
        if name_rule is None:
            if isinstance(value, dict):
                return self.table(declared.path, inside, value)
            self.error_at_top(name, f"{name} must be a table [{inside}]")  # only the top has them
            return None
        if not isinstance(value, dict):
            if where:
                self.error(where, name, f"must hold [{declared.path}] tables")
            else:
                self.error_at_top(name, f"{name} must hold [{declared.path}] tables")
            return None
        members = {}
        for member, content in value.items():
            member_where = f"{inside}.{member}"
            try:
                name_rule(member, self.known_services)
            except ValueError as exc:
                self.error(member_where, None, str(exc))
                continue
            if not isinstance(content, dict):
                self.error(member_where, None, "must be a table")
                continue
            own = self.service_keys.get(member, ()) if declared.path == "services.NAME" else ()
            members[member] = self.table(declared.path, member_where, content, own)
        return members


# ------------------------------------------------------------------------ building


def _split(values: dict, model: type) -> tuple[dict, dict]:
    """(the values that are fields of ``model``, the others)."""
    own = {f.name for f in fields(model)}
    return (
        {k: v for k, v in values.items() if k in own},
        {k: v for k, v in values.items() if k not in own},
    )


def _settings(checked: dict, path: str) -> Settings:
    """Settings of the checked tables: the keys not written keep their defaults; a
    service's job keys are its own copy of [jobs]; a user's per-service quota starts
    from their own."""
    jobs = JobSettings(**checked.get("jobs", {}))
    services = {}
    for name, values in checked.get("services", {}).items():
        own, overrides = _split(values, ServiceSettings)
        services[name] = ServiceSettings(
            jobs=replace(jobs, **overrides) if overrides else None,
            overridden=frozenset(overrides),
            **own,
        )
    users = {}
    for name, values in checked.get("users", {}).items():
        values = dict(values)
        per_service = values.pop("services", {})
        quota_values, own = _split(values, Quota)
        quota = Quota(**quota_values)
        users[name] = User(
            name=name,
            quota=quota,
            **own,
            services={service: replace(quota, **values) for service, values in per_service.items()},
        )
    flat = {
        setting: value
        for name in ("server", "database", "workers", "log")
        for setting, value in checked.get(name, {}).items()
    }
    return Settings(
        jobs=jobs,
        services=services,
        auth=AuthSettings(**checked.get("auth", {})),
        users=users,
        callbacks=CallbackSettings(**checked.get("callbacks", {})),
        path=path,
        **flat,
    )


def _finish(settings: Settings, base_dir: str) -> Settings:
    """Resolve the database URL against the file's folder."""
    url = settings.database_url or Settings().database_url
    parsed = make_url(url)
    if (
        parsed.get_backend_name() == "sqlite"
        and parsed.database
        and parsed.database != ":memory:"
        and not os.path.isabs(parsed.database)
    ):
        url = str(parsed.set(database=os.path.normpath(os.path.join(base_dir, parsed.database))))
    return replace(settings, database_url=url)
