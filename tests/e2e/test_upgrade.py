"""Upgrading (issue 33; docs/operations.md, "Upgrading"), through real nodes on SQLite
and PostgreSQL: a database made by the last release without schema versions (commit
cefa7b4, its ``xruntime/`` taken from git into a folder of its own and served from
there), with jobs in every state — succeeded and fetched or not, a large result kept
as a file, failed, waiting for a retry, queued behind a running one, a parent with its
children, a callback waiting for its receiver — is opened by today's node: the schema
is brought to the head (``xruntime db current`` says so), every finished job answers
the same result, fault and history as before, and the unfinished ones run to their
end; the callback is delivered."""

import io
import os
import subprocess
import tarfile

import pytest
from sqlalchemy import create_engine, text

from tests.clients import RemoteFault, make_client, wait_done, wait_status
from tests.e2e.test_backup import run_cli
from tests.harness import ROOT, Server, free_port
from tests.receiver import Receiver
from xruntime.store import schema_versions
from xruntime.store.schema import metadata

#: The last commit without schema versions: its schema is the baseline.
BEFORE_VERSIONS = "cefa7b42e38c5493dd0933cb6c7f0834e093e77d"
PG_URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory):
    """The release before versions: its ``xruntime/`` package in a folder of its own."""
    known = subprocess.run(
        ["git", "-C", ROOT, "cat-file", "-e", f"{BEFORE_VERSIONS}^{{commit}}"],
        capture_output=True,
    )
    if known.returncode != 0:
        pytest.skip(f"the checkout has no commit {BEFORE_VERSIONS[:7]} (a shallow clone)")
    folder = tmp_path_factory.mktemp("before-versions")
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", BEFORE_VERSIONS, "xruntime"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return str(folder)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    if request.param == "sqlite":
        return None  # the node's own file, in its folder
    if not PG_URL:
        pytest.skip("XRUNTIME_TEST_DATABASE_URL is not set")
    engine = create_engine(PG_URL)
    metadata.drop_all(engine)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    engine.dispose()
    return PG_URL


def node(folder, url, port, receiver_port, old_tree=None):
    extra = (
        '\n[jobs]\nretry_backoff = "2s"\n'
        f'\n[callbacks]\nallowed = ["http://127.0.0.1:{receiver_port}/"]\nretry_delay = "1s"\n'
        'secret = "whsec_AMRZ5oZ1hPyYBIiN9G/ZzNEcT75zmbPS8gblRGa6xq8="\n'
    )
    return Server(
        folder,
        port=port,
        database_url=url,
        workers=1,
        extra=extra,
        # the old release's package first: its folder is the working directory
        prefix=["env", f"--chdir={old_tree}"] if old_tree else (),
        env={"PYTHONPATH": os.pathsep.join(filter(None, [old_tree, ROOT]))},
    )


def listed(client):
    return {job["id"] for job in client.call("XRuntime", "listJobs", {"limit": 1000})["jobs"]}


def snapshot(client, job_id, fetch):
    """What a client can read of a finished job: its fetch answer (or fault) and history,
    but for the row of a callback's failed attempts, which each attempt rewrites (one row
    per attempt series: the callback job's receiver is down until the upgrade)."""
    service, operation = fetch
    try:
        answer = ("result", client.call(service, operation, {"id": job_id}))
    except RemoteFault as fault:
        answer = ("fault", fault.type, fault.message)
    events = client.call("XRuntime", "getJobEvents", {"id": job_id})["events"]
    return answer, [
        (e["status"], e["message"]) for e in events if not e["message"].startswith("callback")
    ]


def test_a_database_made_before_versions_is_upgraded_with_nothing_lost(
    old_tree, tmp_path, database_url
):
    folder, port = str(tmp_path / "node"), free_port()
    receiver_port = free_port()  # no receiver yet: the callback waits in the outbox
    old = node(folder, database_url, port, receiver_port, old_tree).start()
    client = make_client("json", old.base)
    demo, dima = ("XDemo", "fetchSimulateResponse"), ("XDima", "fetchDistanceMatrixResponse")
    started = {}
    try:
        info = client.call("XRuntime", "getRuntimeInformation", {})
        locations = [{"longitude": 8 + i / 50, "latitude": 49 + i / 70} for i in range(600)]
        started["ok"] = (client.call("XDemo", "startSimulate", {"durationMs": 0}), demo)
        started["large"] = (
            client.call("XDima", "startCreateDistanceMatrix", {"startLocations": locations}),
            dima,
        )
        started["failed"] = (
            client.call("XDemo", "startSimulate", {"steps": 2, "failAtStep": 1}),
            demo,
        )
        started["parent"] = (
            client.call(
                "XDima",
                "startCreateDistanceMatrix",
                {"startLocations": locations[:40], "parallelism": 4},
            ),
            dima,
        )
        started["callback"] = (
            client.call(
                "XDemo",
                "startSimulate",
                {"durationMs": 0, "callback": {"url": f"http://127.0.0.1:{receiver_port}/h"}},
            ),
            demo,
        )
        finished = {}
        for job, _fetch in started.values():
            assert wait_done(client, job["id"], timeout=120)["status"] in ("SUCCEEDED", "FAILED")
        client.call("XDemo", "fetchSimulateResponse", {"id": started["ok"][0]["id"]})  # fetched
        for name, (job, fetch) in started.items():
            finished[name] = snapshot(client, job["id"], fetch)
        # unfinished at the upgrade: a retry waiting, one running and one queued behind it
        retried = client.call("XDemo", "startSimulate", {"durationMs": 0, "transientFailures": 1})
        long_one = client.call("XDemo", "startSimulate", {"durationMs": 600_000, "steps": 600})
        queued = client.call("XDemo", "startSimulate", {"durationMs": 0})
        ids_before = {
            job["id"] for job in client.call("XRuntime", "listJobs", {"limit": 1000})["jobs"]
        }
    finally:
        old.stop()
    assert "version" in info

    receiver = Receiver(port=receiver_port)
    new = node(folder, database_url, port, receiver_port).start()
    try:
        client = make_client("json", new.base)
        assert "the job store's schema: 0001_baseline, " in new.log(), new.log()[-2000:]
        current = run_cli("db", "current", "--config", new.config)
        assert current.stdout.startswith(f"{schema_versions.HEAD} (this xruntime's)"), current
        ids_after = {
            job["id"] for job in client.call("XRuntime", "listJobs", {"limit": 1000})["jobs"]
        }
        assert ids_after == ids_before
        for name, (job, fetch) in started.items():
            assert snapshot(client, job["id"], fetch)[0] == finished[name][0], name
            history = snapshot(client, job["id"], fetch)[1]
            assert history[: len(finished[name][1])] == finished[name][1], name
        # (handed back at the old node's stop: stopped once this node runs it again, it
        # ends SUCCEEDED with what it did; stopped while queued, it would fail)
        wait_status(client, long_one["id"], "RUNNING", timeout=120)
        client.call("XRuntime", "stopJob", {"id": long_one["id"]})
        for job in (retried, long_one, queued):
            assert wait_done(client, job["id"], timeout=120)["status"] == "SUCCEEDED"
        got = receiver.wait_for(lambda rs: rs, timeout=60)
        assert got[0].data["id"] == started["callback"][0]["id"]
    finally:
        new.stop()
        receiver.stop()


def serve_once(config):
    return run_cli("serve", "--config", config)


def test_serve_refuses_a_database_a_newer_release_made_in_one_line(tmp_path):
    from xruntime.store import JobStore

    srv = Server(str(tmp_path / "node"))
    url = f"sqlite:///{tmp_path}/node/data/xruntime.db"
    store = JobStore(url)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
        conn.execute(text("DELETE FROM schema_readers"))
        conn.execute(text("INSERT INTO schema_readers VALUES ('0099_from_the_future')"))
    store.close()
    done = serve_once(srv.config)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [entry for entry in done.stderr.splitlines() if "ERROR" in entry]
    assert "0099_from_the_future" in line and "newer xruntime" in line, line


def test_with_upgrades_left_to_the_command_serve_waits_for_db_upgrade(tmp_path):
    from xruntime.store import JobStore

    srv = Server(str(tmp_path / "node"), database_keys={"auto_upgrade": False})
    url = f"sqlite:///{tmp_path}/node/data/xruntime.db"
    store = JobStore(url)
    with store.engine.begin() as conn:  # as the release before versions left it
        conn.execute(text("DROP TABLE alembic_version"))
    store.close()
    done = serve_once(srv.config)
    assert done.returncode == 2, done
    (line,) = [entry for entry in done.stderr.splitlines() if "ERROR" in entry]
    assert "auto_upgrade is false" in line and "xruntime db upgrade" in line, line
    current = run_cli("db", "current", "--config", srv.config)
    assert current.stdout.startswith("before schema versions"), current  # (and left so)
    assert serve_once(srv.config).returncode == 2
    upgraded = run_cli("db", "upgrade", "--config", srv.config)
    assert upgraded.returncode == 0, upgraded
    assert upgraded.stdout.startswith(f"upgraded: {schema_versions.HEAD}"), upgraded.stdout
    srv.start()
    try:
        job = srv.start_job(durationMs=0)
        assert srv.wait_done(job["id"])["status"] == "SUCCEEDED"
    finally:
        srv.stop()
