"""``xruntime backup PATH`` (issue 33; docs/operations.md, "Backup and restore"), on a
real SQLite node under load: the copy is made while jobs start and finish, private
(the folder 0700, the files 0600), and a node restored from it answers every job that
had finished in it byte for byte as the original node does, large results (files
beside the database) included.  PostgreSQL is refused with the word to use pg_dump."""

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading

from tests.harness import ROOT, Server


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "xruntime", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


#: 450 start locations: a matrix of 1.6 MB stored, a file beside the database
MATRIX = {
    "startLocations": [{"longitude": 8 + i / 90, "latitude": 49 + i / 70} for i in range(450)]
}


class Load(threading.Thread):
    """Jobs started one after the other, every other one a matrix kept as a file."""

    def __init__(self, srv):
        super().__init__(daemon=True)
        self.srv, self.stop, self.started = srv, threading.Event(), 0

    def run(self):
        while not self.stop.is_set():
            if self.started % 2:
                self.srv.call("XDima", "startCreateDistanceMatrix", MATRIX)
            else:
                self.srv.start_job(durationMs=20, steps=2)
            self.started += 1


def fetched(srv, job_id):
    """The fetch answer of a finished job, as bytes (its service read from the store)."""
    for service, operation in (
        ("XDima", "fetchDistanceMatrixResponse"),
        ("XDemo", "fetchSimulateResponse"),
    ):
        answer = srv.post(service, operation, {"id": job_id})
        if answer.status_code == 200:
            return answer.content
    raise AssertionError(answer.text)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_backup_under_load_restores_every_finished_job_byte_for_byte(tmp_path):
    srv = Server(str(tmp_path / "node")).start()
    load = Load(srv)
    target = str(tmp_path / "backup")
    try:
        load.start()
        srv.wait_done(srv.call("XDima", "startCreateDistanceMatrix", MATRIX)["id"])
        done = run_cli("backup", target, "--config", srv.config)
        assert done.returncode == 0, done
        assert "result files; the node's writes waited" in done.stdout, done.stdout
        load.stop.set()
        load.join(60)
        assert mode(target) == 0o700 and mode(os.path.join(target, "xruntime.db")) == 0o600
        results = os.path.join(target, "xruntime.db.results")
        assert mode(results) == 0o700
        files = os.listdir(results)
        assert files and all(mode(os.path.join(results, name)) == 0o600 for name in files)
        with sqlite3.connect(os.path.join(target, "xruntime.db")) as conn:
            finished = [
                job_id
                for (job_id,) in conn.execute("SELECT id FROM jobs WHERE status = 'SUCCEEDED'")
            ]
        assert len(finished) >= 2
        original = {job_id: fetched(srv, job_id) for job_id in finished}
    finally:
        load.stop.set()
        srv.stop()

    # restore: the copy put in place as a node's data/ folder
    restored = Server(str(tmp_path / "restored"))
    data = os.path.join(restored.folder, "data")
    shutil.copytree(target, data)
    restored.start()
    try:
        assert sum(len(body) > 1_000_000 for body in original.values()) >= 1
        for job_id, body in original.items():
            assert fetched(restored, job_id) == body, job_id
    finally:
        restored.stop()


def test_a_backup_of_postgresql_is_pg_dump_s(tmp_path):
    srv = Server(str(tmp_path / "node"), database_url="postgresql+psycopg://u@127.0.0.1/x")
    done = run_cli("backup", str(tmp_path / "backup"), "--config", srv.config)
    assert done.returncode == 2 and "pg_dump" in done.stderr, done
    assert not os.path.exists(tmp_path / "backup")


def test_a_backup_into_a_folder_that_holds_something_is_refused(tmp_path):
    srv = Server(str(tmp_path / "node")).start()
    srv.stop()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    done = run_cli("backup", str(tmp_path / "full"), "--config", srv.config)
    assert done.returncode == 1 and "not empty" in done.stderr, done
    assert os.listdir(tmp_path / "full") == ["x"]
