"""One callback as it leaves the server (docs/protocol.md §14): where it may go, how it is
signed, and how it is sent.

A callback is a request the server makes on a caller's behalf, to a URL the caller
chose: without bounds it would let any caller reach what the server can reach (its own
loopback, the cloud's metadata address, the office network).  So a URL must match
``[callbacks] allowed`` (a URL prefix, a host name, an address or network listed), and
every address its host resolves to must be public, or inside an address or network the
administrator listed: a name never unlocks a loopback, private or link-local address,
however it is listed.  An IPv6 address that carries an IPv4 one (IPv4-mapped,
IPv4-compatible, IPv4-translated, NAT64's ``64:ff9b::/96``, 6to4's ``2002::/16``) is
judged as the IPv4 address it carries, and NAT64's local-use ``64:ff9b:1::/48`` as a
private network.  A URL must be one ``http.client`` sends as written: only the
characters RFC 3986 allows, no dot segment (``/xr/../admin``, ``%2e%2e``) and no encoded
slash in its path, so that a URL prefix listed holds every path the receiver sees.
The check runs at the start (``check_callback``) and again at each
attempt, on the addresses resolved for that attempt, and the connection goes to the very
address checked (a name that resolves elsewhere a moment later changes nothing).
Redirects are not followed, an attempt has one deadline for all its steps
(``Connections``), and at most ``ANSWER_BYTES`` of an
answer are read.  A connection is kept open for the next attempts to the same address
(``Connections``), never for another address, even of the same host.

Signing is Standard Webhooks': ``webhook-signature: v1,<base64 of HMAC-SHA256 over
"id.timestamp.body">`` with the secret's bytes (``whsec_<base64>``).
"""

import base64
import hashlib
import hmac
import http.client
import ipaddress
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote, urlsplit

from .. import __version__
from ..protocol.faults import InvalidValueFault
from ..settings.model import Settings

#: Bytes of a receiver's answer read at most (its status is what counts).
ANSWER_BYTES = 4096
#: The longest callback URL (characters), and the bounds of ``progressPeriod`` (ms).
MAX_URL_CHARS = 2000
PROGRESS_PERIOD_MS = (1000, 7 * 86_400_000)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: host, port → the addresses it resolves to (``socket.getaddrinfo`` by default).
Resolver = Callable[[str, int], list[str]]


class Refused(Exception):
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
    """Refused unless ``url`` is one ``http.client`` sends as written: characters RFC
    3986 allows (no space, control character or non-ASCII one; a ``%`` starts an
    escape), no dot segment in its path (``.``, ``..``, once its escapes are decoded,
    and with a ``;parameter`` dropped), and no encoded slash or backslash there."""
    if not _URL_CHARS.fullmatch(url):
        bad = next(c for c in url if not _URL_CHARS.fullmatch(c))
        at = url.index(bad)
        raise Refused(
            f"it holds {_char_name(bad)} at character {at + 1}, which a URL may not hold "
            "(only the characters RFC 3986 allows: percent-encode the others, in UTF-8)"
        )
    if _ESCAPE.search(url):
        raise Refused("a % in it starts no escape (%XX with two hex digits)")
    path = url.split("#", 1)[0].split("?", 1)[0]
    _, _, path = path.partition("://")
    _, _, path = path.partition("/")
    if _ENCODED_SLASH.search(path):
        raise Refused(
            "its path holds an encoded slash or backslash (%2F, %5C), which a receiver may "
            "read as a path separator"
        )
    for segment in path.split("/"):
        decoded = unquote(segment, errors="replace")
        if decoded.split(";", 1)[0] in (".", "..") or any(
            ord(c) < 0x20 or c == "\x7f" for c in decoded
        ):
            raise Refused(
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


def _public(address: Address) -> bool:
    """Whether ``address`` (judged, see ``_address``) is a global one."""
    return address.is_global and address not in _LOCAL_NAT64


def _named(text: str, address: Address) -> str:
    """``address`` as a message names it: ``64:ff9b::7f00:1 (which carries 127.0.0.1)``."""
    return text if str(address) == text else f"{text} (which carries {address})"


def _parts(url: str) -> tuple[str, str, int, str]:
    """(scheme, host in lower case, port, path with query) of an http(s) URL; Refused
    for anything else."""
    try:
        split = urlsplit(url.strip())
        port = split.port
    except ValueError as exc:
        raise Refused(f"it is no URL ({exc})") from None
    scheme = split.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused("only http and https URLs may be called")
    if not split.hostname:
        raise Refused("it names no host")
    if split.username is not None or split.password is not None:
        raise Refused("credentials in the URL are not sent; leave them out")
    path = (split.path or "/") + (f"?{split.query}" if split.query else "")
    host = split.hostname.lower().rstrip(".").strip("[]")
    return scheme, host, port or (443 if scheme == "https" else 80), path


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (an address resolves to itself)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def target_of(url: str, allowed: tuple[str, ...], resolver: Resolver = resolve) -> Target:
    """The target of ``url`` if the rules let it be called, its host resolved now;
    Refused (with the reason) otherwise."""
    if not allowed:
        raise Refused("[callbacks] allowed lists no target: callbacks are off")
    _spelling(url)
    scheme, host, port, path = _parts(url)
    rules = _rules(tuple(allowed))
    if not rules.matches(scheme, host, port, path):
        literal = _address(host)
        shown = f"[{host}]" if ":" in host else host
        carried = (
            f" (which carries {literal})" if literal is not None and str(literal) != host else ""
        )
        raise Refused(
            f"{scheme}://{shown}:{port}{carried} is not among the targets [callbacks] allowed lists"
        )
    try:
        addresses = resolver(host, port)
    except OSError as exc:
        raise Refused(f"{host} does not resolve ({exc})") from None
    if not addresses:
        raise Refused(f"{host} does not resolve")
    # an address written in the URL matched an address, a network or a URL prefix
    # listed: that is the administrator's own word for it; a name never is
    literal = _address(host)
    for text in addresses:
        address = _address(text.split("%")[0])
        if address is None:
            raise Refused(f"{host} resolves to {text}, which is no IP address")
        if not _public(address) and address != literal and not rules.listed(address):
            raise Refused(
                f"{host} resolves to {_named(text.split('%')[0], address)}, a loopback, "
                "private or reserved address that no address or network in [callbacks] "
                "allowed holds"
            )
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
    except Refused as exc:
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


def secret_bytes(secret: str) -> bytes:
    """The key of a ``whsec_<base64>`` secret."""
    return base64.b64decode(secret.removeprefix("whsec_"))


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header of ``body``: ``v1,<base64 HMAC-SHA256>``."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


class Interrupted(OSError):
    """An attempt cut short because the node stops (``Connections.interrupt``)."""


class _Attempt:
    """One POST under way: its deadline, the sockets it uses (duplicates, which the
    watchdog may shut down from its own thread whatever became of the originals, e.g.
    wrapped in TLS), and why it was cut, if it was."""

    __slots__ = ("deadline", "sockets", "cut")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.sockets: list[socket.socket] = []
        self.cut: str | None = None  # "deadline" or "shutdown"

    def left(self) -> float:
        """s until the deadline; TimeoutError when it has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        return left

    def shut(self) -> None:
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected (any more)


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to one checked address, named by its host in ``Host``."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address
        self.watch: Callable[[socket.socket], None] = lambda sock: None

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)
        self.watch(self.sock)  # before anything waits for the receiver (a TLS handshake)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedTls(_Pinned):
    """HTTPS to one checked address; the certificate must name the URL's host."""

    context = ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        self.sock = self.context.wrap_socket(self.sock, server_hostname=self.host)


class Connections:
    """Keep-alive connections, each to one address checked at an attempt, kept idle for
    the next attempts that resolve to the same address (a new TCP connection per
    attempt cost the node and the receiver each more than the rest of the POST).  An
    attempt takes a connection only to an address its own check answered; one kept
    longer than ``IDLE_S``, or past ``MAX_IDLE`` kept in all, is closed.

    Each POST has one deadline for connect, send, the answer's headers and its body
    together (issue 32: a timeout on each read let a receiver that answers a byte
    every few seconds hold a sender for ever): each step waits at most until the
    deadline, and a watchdog thread shuts the attempt's socket down at the deadline,
    which ends whatever step waits then.  ``interrupt`` (the node stops) shuts every
    attempt under way down at once, and refuses the ones that begin after it."""

    #: s a connection is kept idle (below the 5 s of common servers' keep-alive).
    IDLE_S = 4.0
    #: Idle connections kept at most, to every target together.
    MAX_IDLE = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int, str], list[tuple[float, _Pinned]]] = {}
        self._count = 0
        self._attempts: set[_Attempt] = set()  # under way
        self._watching = threading.Condition(self._lock)  # the watchdog waits on it
        self._watchdog: threading.Thread | None = None
        self._interrupted = False
        self._closed = False

    def post(self, target: Target, headers: dict[str, str], body: bytes, timeout_s: float) -> int:
        """POST ``body`` to ``target`` (its first address that connects) and answer the
        HTTP status, all within ``timeout_s``; OSError (TimeoutError past the deadline,
        ``Interrupted`` when the node stops) or ``http.client.HTTPException`` when no
        answer came."""
        attempt = self._begin(timeout_s)
        try:
            return self._post(attempt, target, headers, body)
        except BaseException as exc:
            if attempt.cut == "shutdown":
                raise Interrupted("interrupted by the node's shutdown") from exc
            if attempt.cut == "deadline" or isinstance(exc, TimeoutError):
                raise TimeoutError("timed out") from exc
            raise
        finally:
            self._end(attempt)

    def _post(self, attempt: _Attempt, target: Target, headers: dict[str, str], body: bytes) -> int:
        kind = _PinnedTls if target.scheme == "https" else _Pinned
        error: Exception = OSError("no address")
        for address in target.addresses:
            key = (target.scheme, target.host, target.port, address.split("%")[0])
            kept = self._take(key)
            if kept is not None:
                assert kept.sock is not None  # (kept connected)
                self._watch(attempt, kept.sock)
                try:
                    return self._send(attempt, key, kept, target, headers, body)
                except ConnectionError:  # the receiver closed it while it was idle
                    if attempt.cut is not None:
                        raise
            conn = kind(target.host, target.port, key[3], attempt.left())
            conn.watch = lambda sock: self._watch(attempt, sock)
            try:
                conn.connect()
            except OSError as exc:  # the next address, if any
                conn.close()
                if attempt.cut is not None or isinstance(exc, TimeoutError):
                    raise  # (no time is left for the next address)
                error = exc
                continue
            return self._send(attempt, key, conn, target, headers, body)
        raise error

    def _send(
        self,
        attempt: _Attempt,
        key: tuple[str, str, int, str],
        conn: "_Pinned",
        target: Target,
        headers: dict[str, str],
        body: bytes,
    ) -> int:
        try:
            assert conn.sock is not None  # (connected)
            conn.sock.settimeout(attempt.left())  # no step past the deadline
            conn.request(
                "POST",
                target.path,
                body,
                {
                    "Content-Type": "application/json",
                    "User-Agent": f"xruntime/{__version__}",
                    **headers,
                },
            )
            answer = conn.getresponse()
            answer.read(ANSWER_BYTES)  # never more: its status is the answer
            if attempt.cut is not None:  # its end was the cut: no whole answer in time
                raise TimeoutError("timed out")
        except BaseException:
            conn.close()
            raise
        if answer.isclosed() and conn.sock is not None:  # read to its end, not closing
            self._keep(key, conn)
        else:
            conn.close()
        return answer.status

    # ------------------------------------------------------------------ deadlines

    def _begin(self, timeout_s: float) -> _Attempt:
        attempt = _Attempt(time.monotonic() + timeout_s)
        with self._lock:
            if self._interrupted:
                raise Interrupted("interrupted by the node's shutdown")
            self._attempts.add(attempt)
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch_deadlines, name="callback-deadlines", daemon=True
                )
                self._watchdog.start()
            self._watching.notify()
        return attempt

    def _watch(self, attempt: _Attempt, sock: socket.socket) -> None:
        """Let the watchdog shut ``sock`` down at ``attempt``'s deadline (a duplicate of
        it: the original may be wrapped in TLS meanwhile)."""
        watched = socket.socket(fileno=os.dup(sock.fileno()))
        with self._lock:
            attempt.sockets.append(watched)
            cut = attempt.cut
        if cut is not None:  # cut while it connected
            attempt.shut()

    def _end(self, attempt: _Attempt) -> None:
        with self._lock:
            self._attempts.discard(attempt)
            watched, attempt.sockets = attempt.sockets, []
        for sock in watched:
            sock.close()

    def _watch_deadlines(self) -> None:
        """The watchdog: shut each attempt down at its deadline."""
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                late = [a for a in self._attempts if a.cut is None and a.deadline <= now]
                for attempt in late:
                    attempt.cut = "deadline"
                    attempt.shut()
                waiting = [a.deadline for a in self._attempts if a.cut is None]
                self._watching.wait(min(waiting) - now if waiting else None)

    def interrupt(self) -> None:
        """The node stops: cut every attempt under way, refuse those that begin."""
        with self._lock:
            self._interrupted = True
            for attempt in self._attempts:
                if attempt.cut is None:
                    attempt.cut = "shutdown"
                    attempt.shut()

    # ------------------------------------------------------------------ kept alive

    def _take(self, key: tuple[str, str, int, str]) -> "_Pinned | None":
        with self._lock:
            kept = self._idle.get(key)
            while kept:
                since, conn = kept.pop()
                self._count -= 1
                if time.monotonic() - since < self.IDLE_S:
                    return conn
                conn.close()
        return None

    def _keep(self, key: tuple[str, str, int, str], conn: "_Pinned") -> None:
        now = time.monotonic()
        with self._lock:
            for other, kept in list(self._idle.items()):  # close what idled too long
                while kept and now - kept[0][0] >= self.IDLE_S:
                    kept.pop(0)[1].close()
                    self._count -= 1
                if not kept:
                    del self._idle[other]
            if self._count >= self.MAX_IDLE or self._interrupted:
                conn.close()
                return
            self._idle.setdefault(key, []).append((now, conn))
            self._count += 1

    def close(self) -> None:
        """Cut what is under way (``interrupt``), close what is kept, end the watchdog."""
        self.interrupt()
        with self._lock:
            for kept in self._idle.values():
                for _, conn in kept:
                    conn.close()
            self._idle.clear()
            self._count = 0
            self._closed = True
            self._watching.notify()
