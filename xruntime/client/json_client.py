"""A small client of the JSON binding, for the command-line client (``xruntime start``…).

It speaks only HTTP and JSON (the standard library's urllib: the CLI adds no HTTP
dependency to a server install), so it works against any xruntime server, local or
remote, and through whatever proxy the administrator put in front of it.

What it answers:
- a call's JSON answer;
- ``Fault`` for a fault the server answered (its ``$type`` and message, as the JSON
  binding writes them): the server understood and refused;
- ``Unreachable`` when no xruntime answer came: connection refused, a timeout, or an
  answer that is not the JSON binding's (a proxy's error page).
"""

import base64
import functools
import json
import urllib.error
import urllib.parse
from collections.abc import Iterable
from typing import IO, Any, NoReturn

DEFAULT_URL = "http://127.0.0.1:50000"


class Fault(Exception):
    """A fault the server answered, in the JSON binding's form."""

    def __init__(self, type_name: str, message: str, info: dict[str, Any]) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message, self.info = type_name, message, info


class Unreachable(Exception):
    """No answer from an xruntime server."""


def authorization(user: str | None, token: str | None) -> str | None:
    """The Authorization header for the credentials given (docs/protocol.md §10): Basic with a
    user name, Bearer with a token alone, none without a token."""
    if not token:
        return None
    if user:
        return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode("ascii")
    return f"Bearer {token}"


@functools.cache
def _opener() -> Any:
    """urllib's opener that never follows a redirect: urllib would send the
    Authorization header (the token) to whatever host the answer names.  Made at the
    first call: ``urllib.request`` brings ``http.client`` and ``ssl``, which a node's
    main process, that imports this module for the command line's parser, never uses."""
    import urllib.request
    from http.client import HTTPMessage

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(
            self,
            req: urllib.request.Request,
            fp: IO[bytes],
            code: int,
            msg: str,
            headers: HTTPMessage,
            newurl: str,
        ) -> NoReturn:
            raise Unreachable(
                f"{req.full_url} answered a redirect (HTTP {code}) to {newurl}; it is not "
                "followed, so that your credentials go nowhere else: if that is the server, "
                "give it with --url"
            )

    return urllib.request.build_opener(NoRedirects)


_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def plain_http_warning(url: str, token: str | None) -> str | None:
    """A warning when a token would travel unencrypted to another host than this one."""
    parsed = urllib.parse.urlsplit(url)
    host = (parsed.hostname or "").lower()
    if token and parsed.scheme == "http" and host not in _LOOPBACK and not host.startswith("127."):
        return (
            f"warning: your token goes to {host} over plain HTTP, readable on the way; "
            "use an https:// URL"
        )
    return None


class Client:
    """Calls ``POST {url}/services/rs/<Service>/<operation>``."""

    # a watch is held up to 50 s by the server (docs/protocol.md §4); wait longer than that
    TIMEOUT = 70

    def __init__(
        self, url: str = DEFAULT_URL, user: str | None = None, token: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        auth = authorization(user, token)
        if auth:
            self.headers["Authorization"] = auth
        self._operations: dict[str, list[str]] | None = None

    def call(self, service: str, operation: str, request: dict[str, Any] | None = None) -> Any:
        """The answer of one operation (its decoded JSON), or ``Fault`` / ``Unreachable``."""
        url = f"{self.url}/services/rs/{service}/{operation}"
        body = json.dumps(request or {}).encode()
        opener = _opener()
        import urllib.request  # (imported by _opener)

        req = urllib.request.Request(url, data=body, headers=self.headers, method="POST")
        try:
            with opener.open(req, timeout=self.TIMEOUT) as answer:
                return _json_of(answer.read(), url, answer.status)
        except urllib.error.HTTPError as error:
            with error:
                answer = _json_of(error.read(), url, error.code)
            info = answer.get("faultInfo") if isinstance(answer, dict) else None
            if not isinstance(info, dict) or "$type" not in info:
                raise Unreachable(f"{url} answered HTTP {error.code} without a fault") from None
            raise Fault(info["$type"], str(answer.get("message", "")), info) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise Unreachable(f"cannot reach {self.url}: {reason}") from None

    def watch_jobs(
        self,
        job_ids: Iterable[str],
        progress_update_period: int | None = None,
        maximum_polling_period: int | None = None,
    ) -> list[dict[str, Any]]:
        """watchJobs (docs/protocol.md §14): one long poll over many jobs (at most the
        server's ``max_watched_ids``, 1 000 by default).  Answers the jobs that changed,
        each as watchJob answers it: at once those that ended (or are unknown), else at
        the first change once ``progress_update_period`` ms have passed, else, after
        ``maximum_polling_period`` ms, every job as it stands."""
        request: dict[str, Any] = {"ids": list(job_ids)}
        if progress_update_period is not None:
            request["progressUpdatePeriod"] = progress_update_period
        if maximum_polling_period is not None:
            request["maximumPollingPeriod"] = maximum_polling_period
        jobs: list[dict[str, Any]] = self.call("XRuntime", "watchJobs", request)["jobs"]
        return jobs

    def operations(self) -> dict[str, list[str]]:
        """Each service's operations, as getRuntimeInformation lists them."""
        if self._operations is None:
            info = self.call("XRuntime", "getRuntimeInformation")
            self._operations = {
                s["name"]: list(s.get("operations", [])) for s in info.get("services", [])
            }
        return self._operations

    def start_operation(self, service: str, operation: str) -> str:
        """The start operation a person means: ``startSimulate`` as it is, and
        ``simulate`` (the synchronous name, as listJobs shows it) as ``startSimulate``."""
        if operation.startswith("start"):
            return operation
        named = "start" + operation[:1].upper() + operation[1:]
        return named if named in self.operations().get(service, ()) else operation

    def fetch(self, job_id: str, service: str | None = None) -> Any:
        """The response of a finished job (a FAILED job's own fault is raised).

        A job's fetch operation is named after its response type, which a client
        cannot derive from the id; the server refuses a fetch of another type with
        ``InvalidFetchTypeFault`` before it reads or marks anything, so the fetch
        operations are tried in turn (the job's own service first, when known)."""
        operations = self.operations()
        services = [service] if service is not None and service in operations else []
        services += [name for name in operations if name not in services]
        refused = None
        for name in services:
            for operation in operations[name]:
                if not operation.startswith("fetch"):
                    continue
                try:
                    return self.call(name, operation, {"id": job_id})
                except Fault as fault:
                    if fault.type_name != "InvalidFetchTypeFault":
                        raise
                    refused = fault
        if refused is not None:
            raise refused
        raise Fault("UnknownJobFault", f"there is no job with id {job_id}", {"jobId": job_id})


def _json_of(body: bytes, url: str, status: int) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise Unreachable(
            f"{url} answered HTTP {status}, not the JSON binding's form "
            "(is this an xruntime server?)"
        ) from None
