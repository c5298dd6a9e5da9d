"""The client commands of ``xruntime``: start, watch, fetch, stop, delete, jobs.
(``watch`` of several jobs holds one watchJobs, not a watchJob per job.)

They talk to any server over the JSON binding (``client.Client``). What a command
makes goes to standard output (a job id, a result, a final status, a table); the live
view of a job goes to standard error: a progress bar (rich) on a terminal, one plain
line per change otherwise, so ``ID=$(xruntime start …)`` and ``… > result.json`` work.

Exit codes, for scripts (docs/operations.md):
  0  done: the call answered, the job SUCCEEDED
  1  the server answered a fault (its type and message on stderr), or the job
     ended FAILED, DELETED or UNKNOWN
  2  the command line or its request is wrong (nothing was sent)
  3  no xruntime server answered (connection refused, timeout, not the JSON binding)
  130 interrupted (Ctrl-C); a started job goes on on the server
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ..protocol import states
from .json_client import DEFAULT_URL, Client, Fault, Unreachable, plain_http_warning

OK, FAULT, USAGE, UNREACHABLE, INTERRUPTED = 0, 1, 2, 3, 130
# the job as it is now: the first answer of ``watch ID`` (a wrong URL fails at once)
NOW_PERIODS = {"progressUpdatePeriod": 250, "maximumPollingPeriod": 250}
# a watch on a terminal answers at least every second, so elapsed time and status stay
# current; piped, only changes are printed, so the server holds the watch as long as it may
LIVE_PERIODS = {"progressUpdatePeriod": 250, "maximumPollingPeriod": 1000}
PLAIN_PERIODS = {"progressUpdatePeriod": 250}
RECONNECT_FOR = 30.0  # seconds a watch keeps trying a server that went away


class UsageError(Exception):
    """The command's own input is wrong; nothing was sent."""


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """The client commands, beside serve / check-config / wsdl / token."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("XRUNTIME_URL", DEFAULT_URL),
        help=f"the server (default: $XRUNTIME_URL or {DEFAULT_URL})",
    )
    common.add_argument(
        "--user",
        default=os.environ.get("XRUNTIME_USER"),
        help="user name, with --token (default: $XRUNTIME_USER)",
    )
    common.add_argument(
        "--token",
        default=os.environ.get("XRUNTIME_TOKEN"),
        help="token: Basic with --user, Bearer without (default: $XRUNTIME_TOKEN); "
        "other users of the machine see it in the process list: prefer "
        "--token-file",
    )
    common.add_argument(
        "--token-file",
        dest="token_file",
        metavar="FILE",
        default=os.environ.get("XRUNTIME_TOKEN_FILE"),
        help="read the token from FILE (default: $XRUNTIME_TOKEN_FILE)",
    )

    p = sub.add_parser(
        "start", parents=[common], help="start a job (prints its id; --wait for its result)"
    )
    p.add_argument("service", help="e.g. XDemo")
    p.add_argument("operation", help="e.g. startSimulate (or simulate)")
    p.add_argument(
        "request",
        nargs="?",
        metavar="FILE",
        help="the request as a JSON file, - for standard input (default: {})",
    )
    p.add_argument("--json", dest="request_json", metavar="JSON", help="the request as JSON text")
    p.add_argument(
        "--wait", action="store_true", help="watch the job to its end, then print its result"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="with --wait: write the result to FILE")
    p.set_defaults(func=partial(run, cmd_start))

    p = sub.add_parser(
        "watch", parents=[common], help="jobs' live progress, until they end (one long poll)"
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="a job id; several: watched together")
    p.set_defaults(func=partial(run, cmd_watch))

    p = sub.add_parser("fetch", parents=[common], help="a finished job's result (JSON)")
    p.add_argument("id")
    p.add_argument("-o", "--output", metavar="FILE", help="write the result to FILE")
    p.set_defaults(func=partial(run, cmd_fetch))

    p = sub.add_parser(
        "stop", parents=[common], help="stop a running job (it keeps its intermediate result)"
    )
    p.add_argument("id")
    p.set_defaults(func=partial(run, partial(_job_command, operation="stopJob")))

    p = sub.add_parser("delete", parents=[common], help="delete a job")
    p.add_argument("id")
    p.set_defaults(func=partial(run, partial(_job_command, operation="deleteJob")))

    p = sub.add_parser("jobs", parents=[common], help="list jobs, newest first")
    p.add_argument(
        "--status",
        action="append",
        metavar="STATUS",
        help="only jobs in this status (repeat, or comma-separate, for several)",
    )
    p.add_argument("--service", help="only this service's jobs")
    p.add_argument(
        "--for-user", dest="for_user", metavar="NAME", help="an admin: only this user's jobs"
    )
    p.add_argument(
        "--limit", type=int, default=20, help="at most this many (default 20; 0 for all)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        dest="as_json",
        help="print the jobs as one JSON array, as listJobs answers them",
    )
    p.set_defaults(func=partial(run, cmd_jobs))


def run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """A client command with its exit code; every failure is one line on stderr."""
    try:
        return command(args)
    except Fault as fault:
        print(f"{fault.type_name}: {fault.message}", file=sys.stderr)
        return FAULT
    except Unreachable as error:
        print(f"xruntime: {error}", file=sys.stderr)
        return UNREACHABLE
    except UsageError as error:
        print(f"xruntime: {error}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED


def _client(args: argparse.Namespace) -> Client:
    token = args.token
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as error:
            raise UsageError(f"cannot read the token file: {error}") from None
        if not token:
            raise UsageError(f"the token file {args.token_file} is empty")
    warning = plain_http_warning(args.url, token)
    if warning:
        print(warning, file=sys.stderr)
    return Client(args.url, args.user, token)


def cmd_start(args: argparse.Namespace) -> int:
    request = _request_of(args)
    client = _client(args)
    operation = client.start_operation(args.service, args.operation)
    job = client.call(args.service, operation, request)
    if not args.wait:
        print(job["id"])
        return OK
    try:
        job = watch(client, job)
    except KeyboardInterrupt:
        print(f"interrupted; the job goes on: xruntime watch {job['id']}", file=sys.stderr)
        return INTERRUPTED
    if job["status"] not in states.FINISHED:
        return FAULT
    response = client.fetch(job["id"], args.service)  # a FAILED job raises its fault
    return _write_result(response, args.output)


def cmd_watch(args: argparse.Namespace) -> int:
    """Each job to its end, then one line per job on stdout; OK when all SUCCEEDED."""
    client = _client(args)
    ids = list(dict.fromkeys(args.ids))
    if len(ids) == 1:
        ended = [watch(client, client.call("XRuntime", "watchJob", {"id": ids[0], **NOW_PERIODS}))]
    else:
        ended = watch_many(client, ids)
    from .view import duration

    for job in ended:
        print(f"{job['id']} {job['status']} {duration(job.get('elapsedTime', 0))}")
    return OK if all(job["status"] == states.SUCCEEDED for job in ended) else FAULT


def cmd_fetch(args: argparse.Namespace) -> int:
    response = _client(args).fetch(args.id)
    return _write_result(response, args.output)


def _job_command(args: argparse.Namespace, operation: str) -> int:
    job = _client(args).call("XRuntime", operation, {"id": args.id})
    print(f"{job['id']} {job['status']}")
    return OK


def cmd_jobs(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise UsageError("--limit is a count of jobs, 0 for all")
    client = _client(args)
    request: dict[str, Any] = {}
    statuses = [
        s.strip().upper() for given in args.status or () for s in given.split(",") if s.strip()
    ]
    if statuses:
        request["status"] = statuses
    if args.service:
        request["service"] = args.service
    if args.for_user:
        request["user"] = args.for_user
    jobs: list[dict[str, Any]] = []
    while True:
        want = args.limit - len(jobs) if args.limit else 1000
        page = client.call("XRuntime", "listJobs", {**request, "limit": min(want, 1000)})
        jobs += page.get("jobs", [])
        cursor = page.get("nextCursor")
        if not cursor or (args.limit and len(jobs) >= args.limit):
            break
        request["cursor"] = cursor
    if args.as_json:
        print(json.dumps(jobs, indent=2))
        return OK
    from .view import print_jobs

    print_jobs(jobs)
    return OK


def watch(client: Client, job: dict[str, Any]) -> dict[str, Any]:
    """Follow a job to its final status, drawing it on stderr; its last Job."""
    from .view import BarView, LineView

    live = sys.stderr.isatty()
    view = BarView() if live else LineView()
    periods = LIVE_PERIODS if live else PLAIN_PERIODS
    try:
        view.show(job)
        while job["status"] not in states.TERMINAL:
            job = _watch_once(client, job["id"], periods)
            view.show(job)
    finally:
        view.close()
    return job


def watch_many(client: Client, job_ids: list[str]) -> list[dict[str, Any]]:
    """Follow several jobs to their final statuses with one watchJobs at a time (not a
    watchJob each), drawing each on stderr; their last Jobs, in the order of
    ``job_ids`` (at most the server's max_watched_ids)."""
    from .view import BarView, LineView

    live = sys.stderr.isatty()
    view = BarView(several=True) if live else LineView(several=True)
    periods = LIVE_PERIODS if live else PLAIN_PERIODS
    last: dict[str, dict[str, Any]] = {}
    pending, asked = job_ids, NOW_PERIODS  # the first answer: every job as it is now
    try:
        while pending:
            for job in _patiently(partial(client.watch_jobs, pending, *_periods(asked))):
                last[job["id"]] = job
                view.show(job)
            pending = [i for i in pending if last.get(i, {}).get("status") not in states.TERMINAL]
            asked = periods
    finally:
        view.close()
    return [last[i] for i in job_ids]


def _periods(periods: dict[str, int]) -> tuple[int, int | None]:
    return periods["progressUpdatePeriod"], periods.get("maximumPollingPeriod")


def _watch_once(client: Client, job_id: str, periods: dict[str, int]) -> dict[str, Any]:
    """One watchJob, ``_patiently``."""
    answer: dict[str, Any] = _patiently(
        partial(client.call, "XRuntime", "watchJob", {"id": job_id, **periods})
    )
    return answer


def _patiently(call: Callable[[], Any]) -> Any:
    """``call()``; a server that went away (a restart: jobs survive it) is tried
    again for up to RECONNECT_FOR seconds before the watch gives up."""
    give_up = time.monotonic() + RECONNECT_FOR
    while True:
        try:
            return call()
        except Unreachable:
            if time.monotonic() > give_up:
                raise
            time.sleep(1.0)
        except Fault as fault:
            if fault.type_name != "TemporarilyUnavailableFault" or time.monotonic() > give_up:
                raise
            time.sleep(2.0)


def _request_of(args: argparse.Namespace) -> dict[str, Any]:
    if args.request_json is not None and args.request is not None:
        raise UsageError("give the request as a FILE or with --json, not both")
    if args.output and not args.wait:
        raise UsageError("-o goes with --wait (without it, start prints the job id)")
    if args.request_json is not None:
        text, source = args.request_json, "--json"
    elif args.request == "-":
        text, source = sys.stdin.read(), "standard input"
    elif args.request is not None:
        try:
            with open(args.request, encoding="utf-8") as f:
                text = f.read()
        except OSError as error:
            raise UsageError(f"cannot read {args.request}: {error.strerror or error}") from None
        source = args.request
    else:
        return {}
    try:
        request = json.loads(text)
    except ValueError as error:
        raise UsageError(f"the request in {source} is not JSON: {error}") from None
    if not isinstance(request, dict):
        raise UsageError(f"the request in {source} must be a JSON object")
    return request


def _write_result(response: Any, output: str | None) -> int:
    text = json.dumps(response, indent=2, ensure_ascii=False) + "\n"
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as error:
            raise UsageError(f"cannot write {output}: {error.strerror or error}") from None
        print(f"result written to {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return OK
