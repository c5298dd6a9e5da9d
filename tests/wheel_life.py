"""A job's life against an installed xruntime, outside the checkout (run by .ci/run with
the python of a fresh venv where only the built wheel is installed): a file missing from
the package fails here, not at a user's.

    python wheel_life.py FOLDER

In FOLDER (new, outside the checkout) it writes a configuration file, starts
``xruntime serve`` from the venv, waits for ``/readyz``, then through the JSON binding
starts an XDemo job and an XDima matrix, watches them to their end, fetches, deletes, and
asks ``xruntime --version``, ``db current`` and ``check-config``; it stops the node and
exits 0 when all went as a user expects, 1 otherwise.  Standard library only."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

BIN = os.path.dirname(sys.executable)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body):
    request = urllib.request.Request(
        base + "/services/rs/" + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def ready(base, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"xruntime serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise SystemExit("/readyz never answered 200")


def done(base, job_id):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = post(base, "XRuntime/watchJob", {"id": job_id, "maximumPollingPeriod": 5000})
        if job["status"] in ("SUCCEEDED", "FAILED"):
            return job["status"]
    raise SystemExit(f"job {job_id} never ended")


def cli(*args):
    return subprocess.run(
        [os.path.join(BIN, "xruntime"), *args], capture_output=True, text=True, timeout=60
    )


def main(folder):
    os.makedirs(folder)
    os.chdir(folder)
    port = free_port()
    with open("xserver.toml", "w") as f:
        f.write(
            f'[server]\nport = {port}\nprocesses = 1\n\n[database]\nurl = "sqlite:///data/x.db"\n'
        )
    base = f"http://127.0.0.1:{port}"
    checks = []
    proc = subprocess.Popen([os.path.join(BIN, "xruntime"), "serve", "--config", "xserver.toml"])
    try:
        ready(base, proc)
        demo = post(base, "XDemo/startSimulate", {"durationMs": 200, "steps": 2})
        points = [{"longitude": 8 + i / 10, "latitude": 49 + i / 20} for i in range(30)]
        dima = post(base, "XDima/startCreateDistanceMatrix", {"startLocations": points})
        checks.append(("XDemo job SUCCEEDED", done(base, demo["id"]) == "SUCCEEDED"))
        checks.append(("XDima job SUCCEEDED", done(base, dima["id"]) == "SUCCEEDED"))
        result = post(base, "XDemo/fetchSimulateResponse", {"id": demo["id"]})
        checks.append(("XDemo result fetched", result.get("stepsDone") == 2))
        matrix = post(base, "XDima/fetchDistanceMatrixResponse", {"id": dima["id"]})
        checks.append(("XDima matrix fetched", len(matrix.get("rows", [])) == len(points)))
        deleted = post(base, "XRuntime/deleteJob", {"id": demo["id"]})
        checks.append(("job deleted", deleted["status"] == "DELETED"))
        with urllib.request.urlopen(base + "/services/ws/XDemo?wsdl", timeout=10) as wsdl:
            checks.append(("WSDL served", b"definitions" in wsdl.read()))
        version = cli("--version")
        checks.append((f"--version: {version.stdout.strip()}", version.returncode == 0))
        current = cli("db", "current", "--config", "xserver.toml")
        checks.append((f"db current: {current.stdout.strip()}", current.returncode == 0))
        checked = cli("check-config", "xserver.toml")
        checks.append(("check-config OK", checked.returncode == 0))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    checks.append(("the node stopped cleanly", proc.returncode == 0))
    for what, passed in checks:
        print(("ok   " if passed else "FAIL ") + what)
    return 0 if all(passed for _, passed in checks) else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    finally:
        shutil.rmtree(sys.argv[1], ignore_errors=True)
