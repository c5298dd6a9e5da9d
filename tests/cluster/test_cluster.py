"""Several hosts for real: three hosts in network namespaces, one PostgreSQL
reached over a bridge, HAProxy in front (tests/cluster/net.py).  Host xrt-a's clock is
right, xrt-b's 10 minutes ahead, xrt-c's 10 minutes behind, in every test here.

The tests share one cluster and run in this order: clocks, a partition of xrt-a longer
than the lease, then xrt-c SIGKILLed while HAProxy routes to it."""

import threading
import time

import pytest

from tests.cluster.load import Load, events, jobs_on, run_times, runs, states, wait_until
from tests.cluster.net import HOSTS, NODE_PORT, call_from_inside, fault_type  # noqa: F401
from xruntime.store.clock import MAX_ROUND_TRIP_S

#: A partition's timings are the test: nothing else of the run competes for the cores.
pytestmark = pytest.mark.exclusive

LEASE_S = 30  # engine.housekeeping.LEASE_MS
CLIENTS = 8  # more clients than the cluster's 6 workers: a queue
JOB = {"durationMs": 3000, "steps": 3}
#: The partition's jobs: long enough that the runs that take over the cut-off host's
#: jobs are still running when it comes back with its late outcomes.
LONG_JOB = {"durationMs": 6000, "steps": 6}


def name(host):
    return f"{host}:{NODE_PORT}"


def no_tracebacks(cluster):
    for host, node in cluster.nodes.items():
        log = node.log()
        assert "Traceback" not in log and "Exception in thread" not in log, (
            f"{host}:\n{log[-3000:]}"
        )


def all_done_and_fetched(cluster, load, engine):
    """Every job in the database SUCCEEDED, and every one the clients started fetched."""
    found = wait_until(
        lambda: (lambda s: s if all(v[0] in ("SUCCEEDED", "FAILED") for v in s.values()) else None)(
            states(engine)
        ),
        120,
        "every job finished",
    )
    assert {job_id: v for job_id, v in found.items() if v[0] != "SUCCEEDED"} == {}
    assert load.faults == []
    assert set(load.ids) == load.fetched, "a job was not fetched"
    with engine.connect() as conn:
        from sqlalchemy import text

        unfetched = conn.execute(
            text("SELECT count(*) FROM jobs WHERE first_fetched_at IS NULL AND id = ANY(:ids)"),
            {"ids": load.ids},
        ).scalar()
    assert unfetched == 0
    return found


def test_clocks_ten_minutes_off_requeue_nothing_and_time_nothing_out_early(cluster):
    """50 jobs through HAProxy on the three hosts: each runs once, none is re-queued or
    timed out (queueing_timeout 2m, computation_timeout 1m: a node judging by its
    own clock, 10 minutes ahead, would fail them at once)."""
    proxy = cluster.proxy()
    ahead = cluster.nodes["xrt-b"]
    assert b"FAKETIME=+10m" in open(f"/proc/{ahead.proc.pid}/environ", "rb").read()
    ids = [proxy.start_job(durationMs=1500, steps=3)["id"] for _ in range(50)]
    for job_id in ids:
        done = proxy.wait_done(job_id, timeout=180)
        assert done["status"] == "SUCCEEDED", done
    engine = cluster.pg.engine()
    ran = runs(engine)
    assert all(len(ran[job_id]) == 1 for job_id in ids), "a job ran more than once"
    assert {ran[job_id][0] for job_id in ids} == {name(h) for h in HOSTS}, (
        "every host ran jobs (else the test proves nothing)"
    )
    for messages in events(engine, ids).values():
        assert not [m for m in messages if "queued again" in m or "died" in m or "timeout" in m], (
            messages
        )
    for node in cluster.nodes.values():
        assert "lost to another run" not in node.log()
    no_tracebacks(cluster)


def test_partition_longer_than_the_lease(cluster):
    """xrt-a cut off (store and clients) for longer than its leases (30 s) while clients
    work through HAProxy: its jobs run elsewhere; the node says the store is away and
    answers "try again".  It comes back while their new runs are on, with the outcomes
    of its own runs (done meanwhile): they are refused (the new runs' outcomes stand,
    no outcome changes after the heal), and its log says the jobs were lost to another
    run, not deleted."""
    engine = cluster.pg.engine()
    a = cluster.nodes["xrt-a"]
    with Load(cluster.haproxy.base, CLIENTS, **LONG_JOB) as load:
        wait_until(lambda: len(jobs_on(engine, name("xrt-a"))) >= 2, 60, "xrt-a runs 2 jobs")
        log_before = len(a.log())
        cut_at = time.monotonic()
        cluster.network.cut("xrt-a")
        time.sleep(0.5)  # (a write on its way when cut)
        held = jobs_on(engine, name("xrt-a"))
        assert held, "xrt-a held no job when cut"

        # A call made to the cut-off node (from inside its host) is answered, not held.
        direct = {}
        url = f"http://{HOSTS['xrt-a']}:{NODE_PORT}/services/rs"
        calls = [
            threading.Thread(
                target=lambda op, path, body: direct.__setitem__(
                    op, call_from_inside("xrt-a", f"{url}/{path}", body)
                ),
                args=args,
            )
            for args in (
                ("watchJob", "XRuntime/watchJob", {"id": sorted(held)[0]}),
                ("startSimulate", "XDemo/startSimulate", {}),
            )
        ]
        for t in calls:
            t.start()
        # The node says in its log that the store is away.
        said = wait_until(
            lambda: "cannot be reached" in a.log()[log_before:] and time.monotonic(),
            30,
            "xrt-a's log names the store outage",
        )
        store_outage_logged_after = said - cut_at

        # Its jobs run elsewhere once its leases ran out; then it comes back.
        elsewhere = wait_until(
            lambda: (
                all(
                    v[0] != "QUEUING" and v[1] != name("xrt-a")
                    for v in states(engine, held).values()
                )
                and time.monotonic()
            ),
            LEASE_S + 30,
            "xrt-a's jobs running elsewhere",
        )
        for t in calls:
            t.join(60)
        healed_at = time.monotonic()
        assert healed_at - cut_at > LEASE_S
        before_heal = {job_id: v for job_id, v in states(engine).items() if v[0] == "SUCCEEDED"}
        cluster.network.heal("xrt-a")
        print(
            f"xrt-a held {len(held)} jobs; cut for {healed_at - cut_at:.1f} s; the store outage "
            f"logged after {store_outage_logged_after:.1f} s; its jobs ran elsewhere after "
            f"{elsewhere - cut_at:.1f} s; direct calls: "
            + ", ".join(f"{op} {r[0]:.1f} s {r[1]}" for op, r in direct.items())
        )

        # Its late outcomes: refused, and logged as lost to another run.
        for job_id in held:
            wait_until(
                lambda job_id=job_id: f"job {job_id} lost to another run" in a.log(),
                60,
                f"xrt-a let go of {job_id}",
            )
        cluster.haproxy.wait_servers({"xrt-a": "UP"})
        load.stop()
        gap = load.max_gap(cut_at, time.monotonic())
    lost = [line for line in a.log()[log_before:].splitlines() if "lost to another run" in line]
    print("\n".join(lost))

    for op, (took, status, body) in direct.items():
        assert status == 503 and '"TemporarilyUnavailableFault"' in body, (op, status, body)
        assert took < 20, f"{op} to the cut-off node answered after {took:.1f} s"
    assert store_outage_logged_after < 20
    assert gap < 10, f"the clients were not served for {gap:.1f} s"
    after = all_done_and_fetched(cluster, load, engine)
    changed = {
        job_id: (v, after.get(job_id))
        for job_id, v in before_heal.items()
        if after.get(job_id) != v
    }
    assert changed == {}, "an outcome changed after the heal"
    took = run_times(engine, held)
    # both ends are on the node's estimate of the database's clock, each reading of which
    # may be off by half its round trip (and it may be read again between the two)
    error_ms = MAX_ROUND_TRIP_S * 1000
    assert all(ms >= LONG_JOB["durationMs"] - error_ms for ms in took.values()), (
        f"an outcome came sooner than its run could end: not the last run's ({took})"
    )
    rerun = {job_id for job_id, nodes in runs(engine).items() if len(nodes) > 1}
    assert rerun <= held and len(rerun) <= len(held), (rerun, held)
    log = a.log()[log_before:]
    assert "erased (deleted" not in log and "after it was deleted" not in log
    no_tracebacks(cluster)


def test_sigkill_behind_haproxy(cluster):
    """xrt-c SIGKILLed (with its workers and HTTP processes) while HAProxy routes to
    it and clients work: its jobs are recovered by the others and succeed, and the
    clients keep being served."""
    engine = cluster.pg.engine()
    c = cluster.nodes["xrt-c"]
    cluster.haproxy.wait_servers({host: "UP" for host in HOSTS})
    with Load(cluster.haproxy.base, CLIENTS, **JOB) as load:
        wait_until(lambda: len(jobs_on(engine, name("xrt-c"))) >= 2, 60, "xrt-c runs 2 jobs")
        killed_at = time.monotonic()
        c.kill()
        held = jobs_on(engine, name("xrt-c"))
        assert held
        cluster.haproxy.wait_servers({"xrt-c": "DOWN"})
        elsewhere = wait_until(
            lambda: (
                all(
                    v[0] != "QUEUING" and v[1] != name("xrt-c")
                    for v in states(engine, held).values()
                )
                and time.monotonic()
            ),
            LEASE_S + 30,
            "xrt-c's jobs running elsewhere",
        )
        wait_until(
            lambda: all(v[0] == "SUCCEEDED" for v in states(engine, held).values()),
            60,
            "xrt-c's jobs done elsewhere",
        )
        load.stop()
        gap = load.max_gap(killed_at, time.monotonic())
    print(
        f"xrt-c held {len(held)} jobs when killed; "
        f"they ran elsewhere after {elsewhere - killed_at:.1f} s; "
        f"{len(load.ids)} jobs, {load.retried} calls made again, longest time unserved {gap:.1f} s"
    )
    assert gap < 10, f"the clients were not served for {gap:.1f} s"
    all_done_and_fetched(cluster, load, engine)
    recovered = runs(engine)
    assert {recovered[job_id][-1] for job_id in held} <= {name("xrt-a"), name("xrt-b")}
    rerun = {job_id for job_id, nodes in recovered.items() if name("xrt-c") in nodes[:-1]}
    assert rerun == held, "a job xrt-c did not hold was run again"
    no_tracebacks(cluster)
