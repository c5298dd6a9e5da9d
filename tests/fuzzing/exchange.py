"""Sending one case over a connection of its own, and what came back.

The answer is read as any HTTP client would (``http.client``).  Then the client says
it is done (it half-closes: FIN) and waits for the server to close its side too: a
server that never does keeps a socket in CLOSE_WAIT for ever, the leak this detects for
every single connection, however many other connections are open meanwhile.  A case
that may look unfinished to the server (a body cut short) is half-closed at once, as a
client that gives up would: the server must then answer or close.
"""

import http.client
import socket
import time
from dataclasses import dataclass

#: s: every input is answered, or its connection closed, within this.
ANSWER_WITHIN = 2.0
#: s: once the client is done, the server closes its side within this.
LET_GO_WITHIN = 1.0


@dataclass
class Outcome:
    elapsed: float
    ending: str  # answered | closed | hung | reset | garbled
    status: int = 0
    content_type: str = ""
    body: bytes = b""
    lingered: bool = False  # the server kept its side open after the client had closed
    detail: str = ""


def exchange(port: int, case) -> Outcome:
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN) as sock:
        outcome = _answer(sock, case, start)
        outcome.lingered = not _let_go(sock, already=case.ends_open)
    return outcome


def _answer(sock, case, start) -> Outcome:
    def ended(ending, detail=""):
        return Outcome(time.monotonic() - start, ending, detail=detail)

    try:
        try:
            sock.sendall(case.request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered before it read it all: read what it said
        if case.ends_open:
            sock.shutdown(socket.SHUT_WR)
        response = http.client.HTTPResponse(
            sock, method=case.method if case.method == "HEAD" else "POST"
        )
        response.begin()
        body = response.read()
    except http.client.RemoteDisconnected:
        return ended("closed")
    except TimeoutError:
        return ended("hung")
    except ConnectionResetError:
        return ended("reset")
    except (http.client.HTTPException, ValueError, OSError) as exc:
        return ended("garbled", repr(exc))
    return Outcome(
        time.monotonic() - start,
        "answered",
        response.status,
        response.getheader("Content-Type", ""),
        body,
    )


def _let_go(sock, already: bool) -> bool:
    """Half-close (unless ``already``) and wait for the server's FIN; False if it does
    not come within LET_GO_WITHIN (whatever it sends meanwhile is read and dropped)."""
    try:
        if not already:
            sock.shutdown(socket.SHUT_WR)
        sock.settimeout(LET_GO_WITHIN)
        deadline = time.monotonic() + LET_GO_WITHIN
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except TimeoutError:
        return False
    except OSError:  # reset, or already gone: nothing is left open
        return True
    return False
