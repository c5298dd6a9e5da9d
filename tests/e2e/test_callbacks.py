"""Completion callbacks on real nodes (docs/protocol.md §14): a real receiver gets every
finished job as watchJob answers it, signed; retries reach a receiver that was down;
a node killed before delivering delivers after its restart; two nodes on PostgreSQL
send each event once; a slow receiver slows nothing else; refused targets never get a
request; bad input is refused in every binding's form and stores nothing."""

import os
import threading
import time

import pytest
import standardwebhooks

from tests.clients import BINDINGS, RemoteFault, make_client
from tests.harness import Server, free_port
from tests.receiver import Receiver

SECRET = "whsec_" + "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="
PG_URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")


def callbacks_table(allowed=('"127.0.0.1"',), **keys):
    lines = "".join(f"{key} = {value}\n" for key, value in keys.items())
    return f'\n[callbacks]\nallowed = [{", ".join(allowed)}]\nsecret = "{SECRET}"\n{lines}'


def start(srv, receiver_url, **request):
    r = srv.session.post(
        srv.url("XDemo", "startSimulate"), json={"callback": {"url": receiver_url}, **request}
    )
    assert r.status_code == 200, r.text
    return r.json()["id"]


def watch(srv, job_id):
    return srv.session.post(srv.url("XRuntime", "watchJob"), json={"id": job_id}).json()


def events(srv, job_id):
    r = srv.session.post(srv.url("XRuntime", "getJobEvents"), json={"id": job_id})
    return [e["message"] for e in r.json()["events"]]


def wait_event(srv, job_id, text, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [m for m in events(srv, job_id) if text in m]
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no event with {text!r}: {events(srv, job_id)}")


def finished(received):
    return [r for r in received if r.data["type"] == "job.finished"]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    srv = Server(
        str(tmp_path_factory.mktemp("node")),
        extra=callbacks_table(retry_delay='"200ms"', timeout='"2s"'),
    ).start()
    yield srv
    srv.stop()


def test_every_finished_job_arrives_as_watch_job_answers_it_signed(node):
    receiver = Receiver()
    try:
        ids = [
            start(node, receiver.url, durationMs=100, steps=2),
            start(node, receiver.url, steps=3, failAtStep=2),
            start(node, receiver.url),
        ]
        got = receiver.wait_for(lambda rs: len(finished(rs)) == 3)
        verifier = standardwebhooks.Webhook(SECRET)
        for delivery in finished(got):
            data = verifier.verify(delivery.body, delivery.headers)
            assert data.pop("type") == "job.finished"
            assert data == watch(node, data["id"])
            assert delivery.headers["Content-Type"] == "application/json"
        assert sorted(d.data["id"] for d in finished(got)) == sorted(ids)
        assert {d.data["status"] for d in finished(got)} == {"SUCCEEDED", "FAILED"}
        assert len({d.headers["webhook-id"] for d in got}) == len(got)
        wait_event(node, ids[0], "HTTP 204 (attempt 1)")
    finally:
        receiver.stop()


def test_progress_comes_no_more_often_than_asked(node):
    receiver = Receiver()
    try:
        job_id = start(node, receiver.url, durationMs=2600, steps=13)
        periodic = {"url": receiver.url, "progressPeriod": 1000}
        r = node.session.post(
            node.url("XDemo", "startSimulate"),
            json={"durationMs": 2600, "steps": 13, "callback": periodic},
        )
        with_progress = r.json()["id"]
        receiver.wait_for(lambda rs: len(finished(rs)) == 2)
        mine = receiver.of_job(with_progress)
        progress = [d for d in mine if d.data["type"] == "job.progress"]
        assert 2 <= len(progress) <= 3, [d.data for d in mine]
        gaps = [b.at - a.at for a, b in zip(progress, progress[1:], strict=False)]
        assert all(gap >= 0.9 for gap in gaps), gaps
        assert all(d.data["status"] == "RUNNING" and "progress" in d.data for d in progress)
        assert [d.data["type"] for d in receiver.of_job(job_id)] == ["job.finished"]
    finally:
        receiver.stop()


def test_a_receiver_down_for_a_while_still_gets_it(node):
    port = free_port()
    job_id = start(node, f"http://127.0.0.1:{port}/hook")
    wait_event(node, job_id, "connection refused (attempt 2 of 12")
    receiver = Receiver(port=port)
    try:
        (delivery,) = receiver.wait_for(lambda rs: len(rs) == 1)
        assert delivery.data["id"] == job_id
        wait_event(node, job_id, "HTTP 204")
    finally:
        receiver.stop()


def test_a_slow_receiver_delays_no_other_delivery_and_no_job(node):
    class Slow(Receiver):
        def delay_for(self, got):
            return 10.0 if got.path == "/slow" else 0.0

    receiver = Slow()
    try:
        slow = start(node, f"http://127.0.0.1:{receiver.port}/slow")
        began = time.monotonic()
        fast = [start(node, receiver.url, durationMs=50) for _ in range(5)]
        receiver.wait_for(lambda rs: {r.data["id"] for r in rs} >= set(fast), timeout=8)
        assert time.monotonic() - began < 5  # not after the slow one's 10 s
        assert all(watch(node, job_id)["status"] == "SUCCEEDED" for job_id in fast + [slow])
        assert all(watch(node, job_id)["elapsedTime"] < 3000 for job_id in fast)
        receiver.wait_for(lambda rs: any(r.data["id"] == slow for r in rs), timeout=20)
    finally:
        receiver.stop()


def test_bad_callback_input_is_a_fault_in_each_binding_and_stores_nothing(node):
    before = node.session.post(node.url("XRuntime", "listJobs"), json={}).json()
    bad = [
        ({"progressPeriod": 1000}, "MissingParameterFault", "callback.url"),
        (
            {"url": "http://127.0.0.1:9/h", "progressPeriod": 500},
            "InvalidValueFault",
            "callback.progressPeriod",
        ),
        ({"url": "http://10.1.1.1/h"}, "InvalidValueFault", "callback.url"),
        ({"url": "file:///etc/passwd"}, "InvalidValueFault", "callback.url"),
    ]
    for binding in BINDINGS:
        client = make_client(binding, node.base)
        for callback, fault, parameter in bad:
            if binding == "soap" and "url" not in callback:
                continue  # zeep checks minOccurs itself and does not send it
            with pytest.raises(RemoteFault) as caught:
                client.call("XDemo", "startSimulate", {"callback": callback})
            assert (caught.value.type, caught.value.fields["parameter"]) == (fault, parameter), (
                binding
            )
    after = node.session.post(node.url("XRuntime", "listJobs"), json={}).json()
    assert after.get("jobs", []) == before.get("jobs", [])


def test_refused_targets_never_get_a_request(fresh_server):
    """Not listed; a name listed that resolves to loopback (no address listed holds it);
    a redirect from a listed target to one that is not."""
    other = Receiver()
    redirecting = Receiver(status=302, headers={"Location": other.url})
    allowed = ('"localhost"', f'"http://127.0.0.1:{redirecting.port}/"')
    srv = fresh_server(
        extra=callbacks_table(allowed, retry_delay='"100ms"', max_attempts=2)
    ).start()
    try:
        for url in (other.url, f"http://localhost:{other.port}/hook"):
            r = srv.session.post(srv.url("XDemo", "startSimulate"), json={"callback": {"url": url}})
            assert r.status_code == 400 and r.json()["faultInfo"]["parameter"] == "callback.url", (
                r.text
            )
        job_id = start(srv, redirecting.url)
        wait_event(srv, job_id, "HTTP 302 (redirects are not followed); given up after attempt 2")
        assert len(redirecting.received) == 2 and other.received == []
    finally:
        srv.stop()
        other.stop()
        redirecting.stop()


def test_callbacks_allowed_by_a_reload_are_delivered_by_a_process_started_then(fresh_server):
    """A node whose file allows no target runs no callbacks process and refuses a
    callback; the administrator lists the receiver, the edit is read, and the node
    starts its callbacks process and delivers."""
    receiver = Receiver()
    srv = fresh_server().start()
    try:
        r = srv.session.post(
            srv.url("XDemo", "startSimulate"), json={"callback": {"url": receiver.url}}
        )
        assert r.status_code == 400 and r.json()["faultInfo"]["parameter"] == "callback.url"
        assert "callbacks process is up" not in srv.log()
        with open(srv.config, "a") as f:
            f.write(callbacks_table())
        deadline = time.monotonic() + 30
        while "callbacks process is up" not in srv.log():
            assert time.monotonic() < deadline, srv.log()[-3000:]
            time.sleep(0.05)
        job_id = start(srv, receiver.url)
        got = receiver.wait_for(lambda rs: len(finished(rs)) == 1)
        assert finished(got)[0].data["id"] == job_id
    finally:
        srv.stop()
        receiver.stop()


def test_a_node_killed_before_delivering_delivers_after_its_restart(fresh_server):
    """The job has ended and its event is being sent (the receiver holds the request)
    when the node is killed: the restarted node sends it again, with the same id."""

    held = threading.Event()

    class HoldsTheFirst(Receiver):
        def delay_for(self, got):
            if held.is_set():
                return 0.0
            held.set()
            return 30.0

    receiver = HoldsTheFirst()
    srv = fresh_server(extra=callbacks_table()).start()
    try:
        job_id = start(srv, receiver.url)
        assert held.wait(20)  # the attempt is under way
        assert watch(srv, job_id)["status"] == "SUCCEEDED"
        srv.kill()
        srv.start()
        got = receiver.wait_for(lambda rs: len(rs) >= 1, timeout=20)
        assert got[0].data == {"type": "job.finished", **watch(srv, job_id)}
        wait_event(srv, job_id, "HTTP 204 (attempt 1)")
    finally:
        srv.stop()
        receiver.stop()


def test_an_event_waiting_for_its_retry_survives_a_kill(fresh_server):
    port = free_port()
    srv = fresh_server(extra=callbacks_table(retry_delay='"3s"')).start()
    try:
        job_id = start(srv, f"http://127.0.0.1:{port}/hook")
        wait_event(srv, job_id, "connection refused (attempt 1 of 12; next in 3 s)")
        srv.kill()
        receiver = Receiver(port=port)
        srv.start()
        (delivery,) = receiver.wait_for(lambda rs: len(rs) == 1, timeout=20)
        assert delivery.data["id"] == job_id
        receiver.stop()
    finally:
        srv.stop()


@pytest.mark.skipif(not PG_URL, reason="XRUNTIME_TEST_DATABASE_URL is not set")
def test_two_nodes_on_postgresql_send_each_event_once(tmp_path):
    from sqlalchemy import create_engine

    from xruntime.store.schema import metadata

    engine = create_engine(PG_URL)
    metadata.drop_all(engine)
    engine.dispose()
    receiver = Receiver()
    nodes = [
        Server(
            str(tmp_path / f"n{i}"),
            database_url=PG_URL,
            extra=callbacks_table(),
            server_keys={"node_name": f"cb{i}"},
        )
        for i in range(2)
    ]
    try:
        for srv in nodes:
            srv.start()
        ids = [start(nodes[i % 2], receiver.url) for i in range(60)]
        got = receiver.wait_for(lambda rs: len(rs) >= 60, timeout=60)
        time.sleep(1)  # a second send would come now: none does
        got = list(receiver.received)
        assert sorted(r.data["id"] for r in got) == sorted(ids)
        assert len({r.headers["webhook-id"] for r in got}) == 60
        for job_id in ids:  # one attempt each, recorded by the node that made it
            r = nodes[0].session.post(nodes[0].url("XRuntime", "getJobEvents"), json={"id": job_id})
            sent = [e for e in r.json()["events"] if "callback" in e["message"]]
            assert len(sent) == 1 and "HTTP 204 (attempt 1)" in sent[0]["message"], sent
    finally:
        for srv in nodes:
            srv.stop()
        receiver.stop()
