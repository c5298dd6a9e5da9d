"""Long fuzz runs: the hostile input of tests/e2e/test_fuzz.py by the hundred thousand.

A node is started as the fuzz tests start theirs (``tests/fuzzing/node.py``: SQLite in a
temporary folder, one worker, short job timeouts, requests of 64 KiB at most).  For
each binding in turn (json, jsonrpc, soap, http), ``--count`` inputs are generated
with the same hypothesis strategies (``tests/fuzzing/strategies.py``): hypothesis runs
of ``CHUNK`` examples each, every one with a seed of its own (from ``--seed``, the
binding and the chunk's number, so that a run is reproducible), spread over
``--clients`` client processes.  Each input goes over a connection of its own, and its
answer is judged by the same properties as in the tests
(``tests/fuzzing/properties.py``).

Per binding: inputs sent, elapsed, inputs/s and s per 1000 inputs; the problems by kind
(unanswered, InternalErrorFault, traceback, leaked socket, ...) with an example of
each; the connections left half open (CLOSE_WAIT) on the server's side at the end; the
tracebacks in the node's log; the answers by HTTP status and fault type; the node's
RSS (all its processes) before, after, and the growth.  At the end: the node still
serves a job from start to fetch, and a job finished before the fuzz still answers
its result.  The exit status is 1 if any of this failed.

Every loop is bounded by its count, every input by 2 s (and 1 s for the close); the
script talks to 127.0.0.1 only and stops by itself.

    python benchmarks/fuzz.py [--count 100000] [--binding all|json|jsonrpc|soap|http]
                              [--clients 2] [--seed 0]
"""

import argparse
import collections
import multiprocessing
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from benchmarks.roundtrip import process_names  # noqa: E402
from tests.fuzzing import node as fuzzing  # noqa: E402
from tests.fuzzing.exchange import LET_GO_WITHIN, exchange  # noqa: E402
from tests.fuzzing.properties import LEAKED, judge  # noqa: E402
from tests.fuzzing.strategies import CASES  # noqa: E402
from tests.processes import descendants  # noqa: E402

#: inputs per hypothesis run (its memory of what it generated grows with the run)
CHUNK = 500
MB = 1024 * 1024


def run_chunk(task):
    """One hypothesis run of ``count`` inputs of ``binding``, in a client process:
    (answers by label, problems by kind, an example of each kind of problem)."""
    binding, port, known, chunk_seed, count = task
    answers, problems, examples = collections.Counter(), collections.Counter(), {}

    @seed(chunk_seed)
    @settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(CASES[binding](known))
    def fuzz(case):
        try:
            found, label = judge(case, exchange(port, case))
        except OSError as exc:  # no connection to the node at all
            found, label = [("no connection", repr(exc))], "no connection"
        answers[label] += 1
        for kind, text in found:
            problems[kind] += 1
            examples.setdefault(kind, f"{text}\n      {case!r}"[:1500])

    fuzz()
    return answers, problems, examples


def fuzz_binding(pool, server, binding, args):
    """Fuzz one binding; prints its figures and answers whether all went well."""
    number = list(CASES).index(binding)
    known = [fuzzing.finished_job(server)]
    tasks = [
        (
            binding,
            server.port,
            known,
            (args.seed * 10 + number) * 1_000_000 + index,
            min(CHUNK, args.count - start),
        )
        for index, start in enumerate(range(0, args.count, CHUNK))
    ]
    rss_before, log_at = rss(server), len(server.log())
    answers, problems, examples = collections.Counter(), collections.Counter(), {}
    start = shown = time.monotonic()
    for chunk_answers, chunk_problems, chunk_examples in pool.imap_unordered(run_chunk, tasks):
        answers.update(chunk_answers)
        problems.update(chunk_problems)
        for kind, example in chunk_examples.items():
            examples.setdefault(kind, example)
        if time.monotonic() - shown > 30:
            shown = time.monotonic()
            sent = sum(answers.values())
            print(
                f"  {binding}: {sent} of {args.count} sent, {sent / (shown - start):.0f}/s",
                flush=True,
            )
    elapsed = time.monotonic() - start
    half_open = settled_half_open(server.port)
    tracebacks = fuzzing.tracebacks_logged(server, log_at)
    rss_after = rss(server)
    sent = sum(answers.values())

    print(
        f"{binding}: {sent} inputs in {elapsed:.1f} s: {sent / elapsed:.0f} inputs/s, "
        f"{1000 * elapsed / max(sent, 1):.2f} s per 1000 ({args.clients} client processes)"
    )
    print(
        f"  unanswered {problems['unanswered']}, "
        f"InternalErrorFault {problems['InternalErrorFault']}, "
        f"tracebacks {problems['traceback']} in answers and {len(tracebacks)} in the node's log, "
        f"leaked sockets {problems[LEAKED]} (connections not let go) "
        f"and {len(half_open)} half open at the end"
    )
    others = {
        kind: n
        for kind, n in problems.items()
        if kind not in ("unanswered", "InternalErrorFault", "traceback", LEAKED)
    }
    if others:
        print(f"  other problems: {others}")
    for kind, example in examples.items():
        print(f"  e.g. {kind}: {example}")
    for text in tracebacks[:2]:
        print(f"  logged: {text}")
    before, after = sum(rss_before.values()), sum(rss_after.values())
    print(
        f"  node RSS {before / MB:.1f} MB before, {after / MB:.1f} MB after: "
        f"{(after - before) / MB:+.1f} MB ("
        + ", ".join(
            f"{name} {(rss_after[name] - rss_before[name]) / MB:+.1f}" for name in sorted(rss_after)
        )
        + ")"
    )
    print(
        "  answers: " + ", ".join(f"{label} {n}" for label, n in answers.most_common()), flush=True
    )
    return not problems and not half_open and not tracebacks and sent == args.count


def rss(server) -> dict:
    """The resident memory of the node's processes, summed by kind (main, http,
    worker, tracker)."""
    pids = [server.proc.pid] + descendants(server.proc.pid)
    found = collections.Counter()
    for pid, name in process_names(pids, server.port).items():
        try:
            with open(f"/proc/{pid}/status") as f:
                found[name] += (
                    next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) * 1024
                )
        except (OSError, StopIteration):
            pass  # gone meanwhile (a worker replaced)
    return found


def settled_half_open(port):
    deadline = time.monotonic() + LET_GO_WITHIN
    while fuzzing.half_open(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    return fuzzing.half_open(port)


def still_serves(server, kept) -> bool:
    try:
        served = fuzzing.serves_a_job(server)["stepsDone"] == 2
        result = fuzzing.result_of(server, kept)["stepsDone"] == 2
    except AssertionError as exc:
        print(f"after the fuzz: {exc}")
        return False
    print(
        f"after the fuzz: a new job served from start to fetch: {served}; "
        f"the job finished before the fuzz answers its result: {result}"
    )
    return served and result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="inputs per binding")
    parser.add_argument("--binding", choices=["all", *CASES], default="all")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    bindings = list(CASES) if args.binding == "all" else [args.binding]
    with tempfile.TemporaryDirectory() as folder:
        server = fuzzing.fuzz_server(folder).start()
        try:
            kept = fuzzing.finished_job(server)
            with multiprocessing.get_context("spawn").Pool(args.clients) as pool:
                ok = all([fuzz_binding(pool, server, binding, args) for binding in bindings])
            ok = still_serves(server, kept) and ok
        finally:
            server.stop()
    print("all properties held" if ok else "FAILED: a property did not hold")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
