"""Where a callback may go (docs/protocol.md §14): a URL checked against ``[callbacks]
allowed``, its host resolved, every address judged.

A callback is a request the server makes on a caller's behalf, to a URL the caller
chose: without bounds it would let any caller reach what the server can reach (its own
loopback, the cloud's metadata address, the office network).  So a URL must match
``[callbacks] allowed`` (a URL prefix, a host name, an address or network listed), and
every address its host resolves to must be public, or inside an address or network the
administrator listed: a name never unlocks a loopback, private or link-local address,
however it is listed.  An IPv6 address that carries an IPv4 one (IPv4-mapped,
IPv4-compatible, IPv4-translated, NAT64's ``64:ff9b::/96``, 6to4's ``2002::/16``) is
judged as the IPv4 address it carries, and NAT64's local-use ``64:ff9b:1::/48`` as a
private network.  Such an address is sent to the IPv6 address itself, through a gateway
(but for IPv4-mapped ones, which the kernel sends to the IPv4 address): when what it
carries is no public address, the list must hold both, the IPv4 address it carries and
the IPv6 address (``64:ff9b::/96``), so that listing ``127.0.0.1`` never opens a way to
whatever a NAT64 or 6to4 gateway answers for it.  A URL must be one ``http.client``
sends as written: only the characters RFC 3986 allows, no dot segment
(``/xr/../admin``, ``%2e%2e``) and no encoded slash in its path, so that a URL prefix
listed holds every path the receiver sees.
The check runs at the start (``check_callback``, from ``operations.jobs``) and again at
each attempt (``target_of``, from ``delivery``), on the addresses resolved for that
attempt; the ``Target`` it answers carries those addresses, and ``sending`` connects to
them and no other (a name that resolves elsewhere a moment later changes nothing).
"""

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote, urlsplit

from ..protocol.faults import InvalidValueFault
from ..settings.model import Settings

#: The longest callback URL (characters), and the bounds of ``progressPeriod`` (ms).
MAX_URL_CHARS = 2000
PROGRESS_PERIOD_MS = (1000, 7 * 86_400_000)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: host, port → the addresses it resolves to (``socket.getaddrinfo`` by default).
Resolver = Callable[[str, int], list[str]]


class TargetRefused(Exception):
    """The URL may not be called; the message says why."""


#: The characters a URL may hold (RFC 3986: unreserved, reserved, and ``%`` escapes).
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
#: ``%2f`` and ``%5c``: a slash or backslash a receiver may decode into its path.
_ENCODED_SLASH = re.compile(r"%(2f|5c)", re.IGNORECASE)
#: IPv6 networks whose addresses carry an IPv4 address in their last 32 bits:
#: NAT64 (RFC 6052), IPv4-translated (RFC 2765) and IPv4-compatible (RFC 4291, but
#: ``::`` and ``::1``).  (IPv4-mapped and 6to4 are ``ipaddress``'s own properties.)
_CARRIERS = tuple(ipaddress.IPv6Network(n) for n in ("64:ff9b::/96", "::ffff:0:0:0/96", "::/96"))
#: NAT64's local-use prefix (RFC 8215): where its IPv4 address sits depends on the
#: prefix length the network chose, so it is judged as a private network.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


def _spelling(url: str) -> None:
    """TargetRefused unless ``url`` is one ``http.client`` sends as written: characters RFC
    3986 allows (no space, control character or non-ASCII one; a ``%`` starts an
    escape), no dot segment in its path (``.``, ``..``, once its escapes are decoded,
    and with a ``;parameter`` dropped), and no encoded slash or backslash there."""
    if not _URL_CHARS.fullmatch(url):
        bad = next(c for c in url if not _URL_CHARS.fullmatch(c))
        at = url.index(bad)
        raise TargetRefused(
            f"it holds {_char_name(bad)} at character {at + 1}, which a URL may not hold "
            "(only the characters RFC 3986 allows: percent-encode the others, in UTF-8)"
        )
    if _ESCAPE.search(url):
        raise TargetRefused("a % in it starts no escape (%XX with two hex digits)")
    path = url.split("#", 1)[0].split("?", 1)[0]
    _, _, path = path.partition("://")
    _, _, path = path.partition("/")
    if _ENCODED_SLASH.search(path):
        raise TargetRefused(
            "its path holds an encoded slash or backslash (%2F, %5C), which a receiver may "
            "read as a path separator"
        )
    for segment in path.split("/"):
        decoded = unquote(segment, errors="replace")
        if decoded.split(";", 1)[0] in (".", "..") or any(
            ord(c) < 0x20 or c == "\x7f" for c in decoded
        ):
            raise TargetRefused(
                f"its path holds the segment {segment!r}: dot segments (., .., %2e%2e) and "
                "encoded control characters are not sent; write the path the receiver serves"
            )


def _char_name(char: str) -> str:
    """``' ' (U+0020)``: a character as a message names it."""
    return f"{char!r} (U+{ord(char):04X})"


@dataclass(frozen=True)
class Target:
    """A URL checked against the rules, with the addresses its host resolved to."""

    scheme: str
    host: str
    port: int
    path: str  # with its query
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class _Rules:
    """``[callbacks] allowed``, parsed: (scheme, host, port, path) prefixes, host names,
    name suffixes (``.example.org``) and networks."""

    prefixes: tuple[tuple[str, str, int, str], ...]
    hosts: frozenset[str]
    suffixes: tuple[str, ...]
    networks: tuple[Network, ...]

    def matches(self, scheme: str, host: str, port: int, path: str) -> bool:
        if host in self.hosts or any(
            host == suffix[1:] or host.endswith(suffix) for suffix in self.suffixes
        ):
            return True
        literal = _address(host)
        if literal is not None and self.listed(literal):
            return True
        for p_scheme, p_host, p_port, p_path in self.prefixes:
            if (p_scheme, p_host, p_port) != (scheme, host, port):
                continue
            if not p_path or p_path.endswith("/") and path.startswith(p_path):
                return True
            if path == p_path or path.startswith(p_path + "/") or path.startswith(p_path + "?"):
                return True
        return False

    def listed(self, address: Address) -> bool:
        """Whether an address or network listed holds ``address``."""
        return any(address in network for network in self.networks)


@lru_cache(maxsize=8)
def _rules(allowed: tuple[str, ...]) -> _Rules:
    """The rules of the (normalised) entries of ``[callbacks] allowed``."""
    prefixes, hosts, suffixes, networks = [], set(), [], []
    for entry in allowed:
        if "://" in entry:
            scheme, host, port, path = _parts(entry)
            prefixes.append((scheme, host, port, path))
        elif entry.startswith("."):
            suffixes.append(entry)
        else:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry)
    return _Rules(tuple(prefixes), frozenset(hosts), tuple(suffixes), tuple(networks))


def _address(host: str) -> Address | None:
    """The address ``host`` writes (None for a name), an IPv6 address that carries an
    IPv4 one as that IPv4 address: it is judged as the address it reaches."""
    try:
        found = ipaddress.ip_address(host)
    except ValueError:
        return None
    return _carried(found) or found


def _carried(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (IPv4-mapped, 6to4, NAT64, IPv4-translated,
    IPv4-compatible); None for any other."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    found = address.ipv4_mapped or address.sixtofour
    if found is not None:
        return found
    if any(address in network for network in _CARRIERS) and int(address) > 1:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def _through_gateway_unlisted(written: Address, rules: "_Rules") -> ipaddress.IPv4Address | None:
    """The IPv4 address ``written`` (an address as written or resolved) carries, when
    it is no public one and ``written`` reaches it through a gateway (NAT64, 6to4,
    IPv4-translated or -compatible: anything but IPv4-mapped) that the list does not
    hold; None when it may be called."""
    carried = _carried(written)
    if carried is None or _public(carried):
        return None
    assert isinstance(written, ipaddress.IPv6Address)  # (only those carry one)
    if written.ipv4_mapped is not None:
        return None
    return None if rules.listed(written) else carried


def _gateway_refusal(text: str, carried: ipaddress.IPv4Address) -> "TargetRefused":
    return TargetRefused(
        f"{text} carries {carried}, but is sent to {text} itself, through a NAT64 or 6to4 "
        "gateway: [callbacks] allowed must list that IPv6 address (or its network) as well"
    )


def _public(address: Address) -> bool:
    """Whether ``address`` (judged, see ``_address``) is a global one."""
    return address.is_global and address not in _LOCAL_NAT64


def _named(text: str, address: Address) -> str:
    """``address`` as a message names it: ``64:ff9b::7f00:1 (which carries 127.0.0.1)``."""
    return text if str(address) == text else f"{text} (which carries {address})"


def _parts(url: str) -> tuple[str, str, int, str]:
    """(scheme, host in lower case, port, path with query) of an http(s) URL; TargetRefused
    for anything else."""
    try:
        split = urlsplit(url.strip())
        port = split.port
    except ValueError as exc:
        raise TargetRefused(f"it is no URL ({exc})") from None
    scheme = split.scheme.lower()
    if scheme not in ("http", "https"):
        raise TargetRefused("only http and https URLs may be called")
    if not split.hostname:
        raise TargetRefused("it names no host")
    if split.username is not None or split.password is not None:
        raise TargetRefused("credentials in the URL are not sent; leave them out")
    path = (split.path or "/") + (f"?{split.query}" if split.query else "")
    host = split.hostname.lower().rstrip(".").strip("[]")
    return scheme, host, port or (443 if scheme == "https" else 80), path


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (an address resolves to itself)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def target_of(url: str, allowed: tuple[str, ...], resolver: Resolver = resolve) -> Target:
    """The target of ``url`` if the rules let it be called, its host resolved now;
    TargetRefused (with the reason) otherwise."""
    if not allowed:
        raise TargetRefused("[callbacks] allowed lists no target: callbacks are off")
    _spelling(url)
    scheme, host, port, path = _parts(url)
    rules = _rules(tuple(allowed))
    if not rules.matches(scheme, host, port, path):
        literal = _address(host)
        shown = f"[{host}]" if ":" in host else host
        carried = (
            f" (which carries {literal})" if literal is not None and str(literal) != host else ""
        )
        raise TargetRefused(
            f"{scheme}://{shown}:{port}{carried} is not among the targets [callbacks] allowed lists"
        )
    try:
        through = _through_gateway_unlisted(ipaddress.ip_address(host), rules)
    except ValueError:  # a name: its addresses are judged below
        through = None
    if through is not None:
        raise _gateway_refusal(host, through)
    try:
        addresses = resolver(host, port)
    except OSError as exc:
        raise TargetRefused(f"{host} does not resolve ({exc})") from None
    if not addresses:
        raise TargetRefused(f"{host} does not resolve")
    # an address written in the URL matched an address, a network or a URL prefix
    # listed: that is the administrator's own word for it; a name never is
    literal = _address(host)
    for text in addresses:
        address = _address(text.split("%")[0])
        if address is None:
            raise TargetRefused(f"{host} resolves to {text}, which is no IP address")
        if not _public(address) and address != literal and not rules.listed(address):
            raise TargetRefused(
                f"{host} resolves to {_named(text.split('%')[0], address)}, a loopback, "
                "private or reserved address that no address or network in [callbacks] "
                "allowed holds"
            )
        through = _through_gateway_unlisted(ipaddress.ip_address(text.split("%")[0]), rules)
        if through:
            raise _gateway_refusal(text, through)
    return Target(scheme, host, port, path, tuple(addresses))


def check_callback(
    url: str,
    progress_period: int | None,
    settings: Settings,
    owner: str,
    resolver: Resolver = resolve,
) -> None:
    """At a start: InvalidValueFault unless a callback to ``url`` (with progress every
    ``progress_period`` ms) may be sent and signed for ``owner`` (docs/protocol.md §14)."""
    low, high = PROGRESS_PERIOD_MS
    if progress_period is not None and not low <= progress_period <= high:
        raise InvalidValueFault(
            f"invalid value for callback.progressPeriod: it must be between {low} and {high} ms",
            parameter="callback.progressPeriod",
            value=str(progress_period),
        )
    if len(url) > MAX_URL_CHARS:
        raise InvalidValueFault(
            f"invalid value for callback.url: at most {MAX_URL_CHARS} characters are allowed",
            parameter="callback.url",
            value=url[:200],
        )
    secret, key = settings.callback_secret(owner)
    try:
        target_of(url, settings.callbacks.allowed, resolver)
    except TargetRefused as exc:
        raise InvalidValueFault(
            f"invalid value for callback.url: {exc}",
            parameter="callback.url",
            value=url[:200],
            hint=(
                "The server's administrator lists the targets callbacks may go to in "
                "[callbacks] allowed."
                if not settings.callbacks.allowed
                else "Use a URL that [callbacks] allowed lists, or ask the administrator to "
                "list yours."
            ),
        ) from None
    if not secret:
        raise InvalidValueFault(
            f"callbacks cannot be signed: {key} is not set",
            parameter="callback",
            hint=f"The server's administrator sets {key} (`xruntime token new-secret` prints one).",
        )
