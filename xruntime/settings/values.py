"""The kinds of value a configuration key may hold, each a check and a name for the docs.

Each key's declaration (``model``) says which kind it is; this module says what each
kind accepts.  A check takes the value as TOML decoded it and returns it as the settings
hold it (a duration as milliseconds, an origin in lower case), or raises ``ValueError``
whose message is the reason an administrator reads after ``line N: [table] key:``.  Kept
apart from the declarations so that a new key is one line there, and a new kind of value
is written once here.
"""

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

#: what tomllib gives for a value: str, int, float, bool, list, dict, dates
TomlValue = object


#: what a kind's check gives: the settings' value (a duration's milliseconds: an int)
Value = TypeVar("Value")


@dataclass(frozen=True)
class Kind(Generic[Value]):
    """One kind of value: ``check`` turns a TOML value into the settings' value (or
    raises ValueError with the reason); ``name`` describes it in the docs."""

    name: str
    check: Callable[[TomlValue], Value]


# ------------------------------------------------------------------------ durations

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3600_000, "d": 86400_000}
_LONGEST_MS = 100 * 365 * 86400_000


def parse_duration(value: TomlValue) -> int:
    """A duration as milliseconds: a string with a unit (``"500ms"``, ``"30s"``,
    ``"15m"``, ``"48h"``, ``"7d"``), or ``0`` / ``"0"`` for none; raises ValueError with
    a reason.  A number without a unit is refused: a request's timeouts are
    milliseconds and the file's were seconds, so ``5000`` meant 83 minutes here."""
    if isinstance(value, bool):
        raise ValueError('expected a duration such as "30s", "15m" or "48h"')
    if isinstance(value, (int, float)):
        if value == 0:
            return 0
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f'{value!r} is not a duration; use e.g. "30s", "15m", "48h"')
        if value < 0:
            raise ValueError("a duration cannot be negative")
        raise ValueError(_no_unit(value))
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            number, unit = float(match.group(1)), match.group(2)
            if unit is None:
                if number == 0:
                    return 0
                raise ValueError(_no_unit(match.group(1)))
            ms = int(round(number * _UNIT_MS[unit]))
            if ms > _LONGEST_MS:
                raise ValueError("a duration longer than 100 years is not possible")
            return ms
        if value.strip().startswith("-"):
            raise ValueError("a duration cannot be negative")
    raise ValueError(f'{value!r} is not a duration; use e.g. "500ms", "30s", "15m", "48h", "7d"')


def _no_unit(number: object) -> str:
    return (
        f'{number} has no unit: write "{number}s" for {number} seconds or "{number}ms" for '
        f"{number} milliseconds (units: ms, s, m, h, d)"
    )


def duration(positive: bool = False) -> Kind[int]:
    """A duration (``0`` meaning none), or with ``positive`` one longer than 0."""
    if not positive:
        return Kind("duration", parse_duration)

    def check(value: TomlValue) -> int:
        ms = parse_duration(value)
        if ms <= 0:
            raise ValueError("must be longer than 0")
        return ms

    return Kind("duration > 0", check)


# ------------------------------------------------------------------------ plain values


def integer(low: int, high: int | None = None) -> Kind[int]:
    """An integer from ``low`` to ``high`` (no upper bound when None)."""

    def check(value: TomlValue) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if value < low or (high is not None and value > high):
            raise ValueError(
                f"must be between {low} and {high}"
                if high is not None
                else f"must be at least {low}"
            )
        return value

    return Kind(f"integer {low}–{high}" if high is not None else f"integer ≥ {low}", check)


def _string(value: TomlValue) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _boolean(value: TomlValue) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


#: The databases a node runs on: dialect → {driver: the module it needs}; None: the
#: dialect's default driver.
_DATABASES = {
    "sqlite": {None: "sqlite3", "pysqlite": "sqlite3"},
    "postgresql": {"psycopg": "psycopg", None: "psycopg2", "psycopg2": "psycopg2"},
}
_DATABASE_URL = re.compile(r"^([A-Za-z0-9]+)(?:\+([A-Za-z0-9_]+))?://")


def _database_url(value: TomlValue) -> str:
    """A SQLAlchemy URL of a database a node runs on, its driver installed (the
    connection itself is tried by ``check-config --connect`` and at ``serve``)."""
    url = _string(value)
    found = _DATABASE_URL.match(url)
    if found is None:
        raise ValueError(
            f"{url!r} is not a database URL; use sqlite:///path/to/file.db or "
            "postgresql+psycopg://user@host/database"
        )
    dialect, driver = found.group(1).lower(), found.group(2)
    drivers = _DATABASES.get(dialect)
    if drivers is None:
        raise ValueError(
            f"{dialect!r} is not a database xruntime runs on; use sqlite:///path/to/file.db "
            "or postgresql+psycopg://user@host/database"
        )
    if driver not in drivers:
        raise ValueError(
            f"{dialect}+{driver} is not a driver xruntime runs on; use "
            + (
                "sqlite:///path/to/file.db"
                if dialect == "sqlite"
                else "postgresql+psycopg://user@host/database"
            )
        )
    import importlib.util

    if importlib.util.find_spec(drivers[driver]) is None:
        raise ValueError(
            f"the driver {drivers[driver]} of {found.group(0)} is not installed; "
            "use postgresql+psycopg://… (psycopg comes with xruntime)"
        )
    return url


def choice(*options: str) -> Kind[str]:
    """One of the strings ``options``, as written (``"info"``, not ``"INFO"``)."""
    quoted = [f'"{option}"' for option in options]
    name = ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]

    def check(value: TomlValue) -> str:
        if not isinstance(value, str) or value not in options:
            raise ValueError(f"expected {name}, got {value!r}")
        return value

    return Kind(name, check)


STRING = Kind("string", _string)
BOOLEAN = Kind("boolean", _boolean)
DATABASE_URL = Kind("database URL", _database_url)


# ------------------------------------------------------------------------ checked strings


def _public_url(value: TomlValue) -> str:
    text = _string(value)
    if text and not re.match(r"^https?://[^/\s]+", text):
        raise ValueError('must be empty or an http(s) URL such as "https://host/xr"')
    return text.rstrip("/")


def _node_name(value: TomlValue) -> str:
    """A name for the node in the store: unique among the nodes of one database."""
    text = _string(value).strip()
    if text and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,199}", text):
        raise ValueError(f"{text!r} is no node name: letters, digits and _ . : @ -, at most 200")
    return text


def _token_sha256(value: TomlValue) -> str:
    text = _string(value).strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise ValueError(
            "expected the 64 hex digits of the token's sha256 "
            "(`xruntime token new NAME` prints them)"
        )
    return text


def _webhook_secret(value: TomlValue) -> str:
    """A Standard Webhooks secret: ``whsec_`` and the base64 of 24 to 64 random bytes."""
    text = _string(value).strip()
    if not text:
        return text
    try:
        raw = base64.b64decode(text.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if not text.startswith("whsec_") or not 24 <= len(raw) <= 64:
        raise ValueError(
            'expected "whsec_" and the base64 of 24 to 64 random bytes '
            "(`xruntime token new-secret` prints one)"
        )
    return text


PUBLIC_URL = Kind('http(s) URL or ""', _public_url)
WEBHOOK_SECRET = Kind('"whsec_<base64>" or ""', _webhook_secret)
NODE_NAME = Kind("name", _node_name)
TOKEN_SHA256 = Kind("64 hex digits", _token_sha256)


# ------------------------------------------------------------------------ lists


def _strings(value: TomlValue) -> list:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return value


#: a host name; with a leading dot, that name and every name under it
_HOST_NAME = r"\.?[a-z0-9_]([a-z0-9_\-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_\-]*[a-z0-9_])?)*"


def _listed(name: str, trailing: str, pattern: str, why: str) -> Kind[tuple]:
    """A list of strings, each stripped and in lower case without a trailing
    ``trailing``, and either "*" or matching ``pattern``; else ``why`` after the item."""

    def check(value: TomlValue) -> tuple:
        items = []
        for item in _strings(value):
            normalised = item.strip().lower().rstrip(trailing)
            if normalised != "*" and not re.fullmatch(pattern, normalised):
                raise ValueError(f"{item!r} {why}")
            items.append(normalised)
        return tuple(items)

    return Kind(name, check)


#: Origins such as ``https://app.example:8443`` (scheme, host, port; no path), or "*".
ORIGINS = _listed(
    "list of origins",
    "/",
    r"https?://[a-z0-9.\-]+(:[0-9]{1,5})?|https?://\[[0-9a-f:.]+\](:[0-9]{1,5})?",
    'is no origin; write scheme://host[:port] without a path, e.g. "https://app.example", '
    'or "*" for every origin',
)
#: Host names (``.example.org``: that name and every name under it), or "*".
HOSTS = _listed(
    "list of host names",
    ".",
    _HOST_NAME,
    'is no host name; write a name without scheme or port, e.g. "xr.example.org", '
    '".example.org" or "*"',
)
_TARGET_HOST = re.compile(_HOST_NAME)
_TARGET_URL = re.compile(r"(https?)://(\[[0-9a-f:.]+\]|[a-z0-9_.\-]+)(:[0-9]{1,5})?(/[^\s?#]*)?")


def callback_target(item: str) -> str:
    """One entry of ``[callbacks] allowed``, normalised (lower-case host, no trailing
    dot): a URL prefix (``https://hooks.example.org/xr/``), a host name
    (``hooks.example.org``; ``.example.org``: every name under it), an IP address or a
    network (``10.1.2.0/24``).  Raises ValueError saying what is accepted."""
    text = item.strip()
    url = _TARGET_URL.fullmatch(text.lower() if "://" not in text else _lower_origin(text))
    if url is not None:
        return url.group(0)
    lowered = text.lower().rstrip(".")
    try:
        return str(ipaddress.ip_network(lowered.strip("[]"), strict=False))
    except ValueError:
        pass
    if "://" not in lowered and "/" not in lowered and _TARGET_HOST.fullmatch(lowered):
        return lowered
    raise ValueError(
        f"{item!r} is no callback target; write an http(s) URL prefix "
        '("https://hooks.example.org/xr/"), a host name ("hooks.example.org", '
        '".example.org" for every name under it), an IP address or a network ("10.0.0.0/8")'
    )


def _lower_origin(url: str) -> str:
    """``url`` with its scheme and host in lower case (a path keeps its case)."""
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}{slash}{path}"


def _callback_targets(value: TomlValue) -> tuple:
    return tuple(callback_target(item) for item in _strings(value))


#: Where callbacks may go (``[callbacks] allowed``).
CALLBACK_TARGETS = Kind("list of URL prefixes, host names or networks", _callback_targets)


# ------------------------------------------------------------------------ table names

USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")
#: The user name PTV clients send with any user's token (docs/protocol.md §10).
ANY_USER = "xtok"

#: checks the NAME of a ``[family.NAME]`` table: (name, the known services or None) →
#: None, or raises ValueError with the reason
NameRule = Callable[[str, Sequence[str] | None], None]


def service_name(name: str, known_services: Sequence[str] | None) -> None:
    """A service's name: one the server serves (any, when the list is not known)."""
    if known_services is not None and name not in known_services:
        raise ValueError(f"no service named {name!r} (known: {', '.join(known_services)})")


def user_name(name: str, known_services: Sequence[str] | None = None) -> None:
    """A user's name: letters, digits and ``_ . @ -``; not the name of any user."""
    if not USER_NAME.match(name):
        raise ValueError(
            f"{name!r} is no user name: letters, digits and _ . @ -, "
            "at most 100, starting with a letter or digit"
        )
    if name == ANY_USER:
        raise ValueError(
            f"{ANY_USER!r} is the name clients send with any user's token; choose another name"
        )
