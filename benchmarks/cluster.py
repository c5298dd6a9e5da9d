"""Jobs per second through HAProxy with 1, 2 and 3 hosts on one PostgreSQL, and the time
from a host's cut to its jobs running elsewhere.

The hosts are network namespaces of this machine (tests/cluster/net.py: a bridge, a
PostgreSQL of their own on it, Debian's HAProxy on 127.0.0.1), so they share its cores
with PostgreSQL, HAProxy and the clients: the figures show what the nodes cost
together, not what more machines would add.  Needs root, haproxy and PostgreSQL 15's
binaries; everything is removed afterwards.

    sudo .venv/bin/python benchmarks/cluster.py [--seconds 15] [--clients 16]

A job here is XDemo's startSimulate (no duration) → watchJob until done →
fetchSimulateResponse, each call through HAProxy; a client starts its next job when
it fetched the last.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.cluster.load import Load, jobs_on, states, wait_until  # noqa: E402
from tests.cluster.net import HOSTS, NODE_PORT, Cluster, missing  # noqa: E402


def throughput(cluster, clients, seconds) -> tuple:
    with Load(cluster.haproxy.base, clients, durationMs=0) as load:
        time.sleep(3)  # warm-up: connections, first claims
        began, done_before = time.monotonic(), len(load.fetched)
        time.sleep(seconds)
        done = len(load.fetched) - done_before
        took = time.monotonic() - began
        load.stop()
    assert load.faults == [], load.faults[:3]
    return done / took, load.retried


def cut_to_elsewhere(cluster, engine) -> tuple:
    """Cut xrt-a while it runs jobs; seconds until every job it held runs on another
    host (or is done there), and how many it held."""
    a = f"xrt-a:{NODE_PORT}"
    with Load(cluster.haproxy.base, 8, durationMs=3000, steps=3) as load:
        wait_until(lambda: len(jobs_on(engine, a)) >= 2, 60, "xrt-a runs 2 jobs")
        cut = time.monotonic()
        cluster.network.cut("xrt-a")
        time.sleep(0.5)
        held = jobs_on(engine, a)
        elsewhere = wait_until(
            lambda: (
                all(v[0] != "QUEUING" and v[1] != a for v in states(engine, held).values())
                and time.monotonic()
            ),
            90,
            "xrt-a's jobs elsewhere",
        )
        cluster.network.heal("xrt-a")
        cluster.haproxy.wait_servers({"xrt-a": "UP"}, 60)
        load.stop()
    assert load.faults == [], load.faults[:3]
    return elsewhere - cut, len(held)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    lacks = missing()
    if lacks:
        sys.exit("needs " + ", ".join(lacks))
    print(
        f"{os.cpu_count()} cores on this machine, shared by every host (network namespaces), "
        "PostgreSQL, HAProxy and the clients"
    )
    print(
        f"{args.clients} clients through HAProxy, each: start (no duration), watch, fetch; "
        f"2 workers and 2 HTTP processes per node; {args.seconds:g} s measured after 3 s of warm-up"
    )
    folder = tempfile.mkdtemp(prefix="xruntime-cluster-bench-")
    hosts = list(HOSTS)
    for count in (1, 2, 3):
        cluster = Cluster(folder, offsets={host: None for host in hosts[:count]})
        try:
            cluster.up()
            rate, retried = throughput(cluster, args.clients, args.seconds)
            print(
                f"  {count} node{'s' if count > 1 else ' '}: {rate:7.1f} jobs/s"
                + (f" ({retried} calls made again)" if retried else ""),
                flush=True,
            )
            if count == 3:
                took, held = cut_to_elsewhere(cluster, cluster.pg.engine())
                print(
                    f"a host cut off (iptables DROP) while running {held} jobs: "
                    f"they ran elsewhere {took:.1f} s after the cut "
                    "(lease 30 s, renewed every 5 s; recovery every 5 s)"
                )
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
