"""The HTTP ``Prefer`` header (RFC 7240), read as the RFC writes it.

OGC API – Processes asks for asynchronous execution with ``Prefer: respond-async``;
clients write it in every form the grammar allows (``respond-async``,
``Respond-Async; wait=10``, ``return=minimal, respond-async``, several headers), so it
is parsed, not compared::

    Prefer     = 1#preference
    preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] )
    parameter  = token [ BWS "=" BWS word ]
    word       = token / quoted-string

Tokens are compared without regard to case; a quoted value keeps what it quotes (a
``\\`` escapes the next character); a preference named twice counts once, the first;
a preference this server does not know is ignored, as RFC 7240 §2 asks.  Text that the
grammar does not allow never raises: what cannot be read as a preference is skipped.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

#: RFC 7230's tchar: the characters a token is made of.
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclass(frozen=True)
class Preference:
    """One preference: its name (lower case), its value (None when it has none) and
    its parameters (name in lower case → value, None when it has none)."""

    name: str
    value: str | None = None
    parameters: dict[str, str | None] = field(default_factory=dict)


def _split(text: str, separator: str) -> list[str]:
    """``text`` cut at ``separator`` outside quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif quoted and char == "\\":
            current.append(char)
            escaped = True
        elif char == '"':
            current.append(char)
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _token(text: str) -> str | None:
    """``text`` (spaces around it dropped) when it is a token, else None."""
    text = text.strip(" \t")
    return text if text and all(c in _TCHAR for c in text) else None


def _word(text: str) -> str | None:
    """The value of a token or quoted string (None when ``text`` is neither)."""
    text = text.strip(" \t")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        out: list[str] = []
        escaped = False
        for char in text[1:-1]:
            if escaped:
                out.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                return None  # a quote inside a quoted string must be escaped
            else:
                out.append(char)
        return None if escaped else "".join(out)
    return _token(text)


def _pair(text: str) -> tuple[str, str | None] | None:
    """``token [= word]`` as (lower-case name, value), or None when it is not one."""
    name, equals, value = text.partition("=")
    token = _token(name)
    if token is None:
        return None
    if not equals:
        return token.lower(), None
    word = _word(value)
    # "name=" with nothing after it: RFC 7240 §2 reads an empty value as no value
    if word is None and value.strip(" \t"):
        return None
    return token.lower(), word or None


def preferences(headers: Iterable[str]) -> dict[str, Preference]:
    """The preferences of every ``Prefer`` header's value in ``headers``, by name (lower
    case); the first of a name counts."""
    found: dict[str, Preference] = {}
    for header in headers:
        for item in _split(header, ","):
            if not item.strip(" \t"):
                continue  # "a, , b": empty list elements are allowed
            head, *rest = _split(item, ";")
            pair = _pair(head)
            if pair is None or pair[0] in found:
                continue
            parameters: dict[str, str | None] = {}
            for text in rest:
                parameter = _pair(text) if text.strip(" \t") else None
                if parameter is not None:
                    parameters.setdefault(*parameter)
            found[pair[0]] = Preference(pair[0], pair[1], parameters)
    return found


def prefers(headers: Iterable[str], name: str) -> bool:
    """Whether ``headers`` (each a ``Prefer`` value) state the preference ``name``."""
    return name.lower() in preferences(headers)
