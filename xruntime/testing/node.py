"""A real node for a test: ``python -m xruntime serve`` in a subprocess, on SQLite in a
folder of the test's and a free port, stopped (SIGTERM) when the test is done."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .clients import BINDINGS, client_for


class NodeFailed(RuntimeError):
    """The node exited, or did not answer in time; the message ends with its log."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Node:
    """One node of xruntime serving every installed service.

    ``config`` is TOML added to the node's file (e.g. ``"[services.XWords]\\nmax_words =
    10\\n"``); ``env`` is added to the node's environment (e.g.
    ``{"XRUNTIME_SERVICE_MODULES": "mypackage.service"}`` for a service not installed)."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        config: str = "",
        env: Mapping[str, str] | None = None,
        workers: int = 2,
    ) -> None:
        self.folder = Path(folder)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = self.folder / "xserver.toml"
        self.log_path = self.folder / "node.log"
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.folder.mkdir(parents=True, exist_ok=True)
        database = (self.folder / "xruntime.db").resolve()
        self.config_path.write_text(
            "[server]\n"
            'host = "127.0.0.1"\n'
            f"port = {self.port}\n"
            "processes = 1\n"
            f'\n[database]\nurl = "sqlite:///{database}"\n'
            f"\n[workers]\ncount = {workers}\n\n" + config,
            encoding="utf-8",
        )

    def start(self, timeout: float = 60) -> "Node":
        """Start the node and wait until it answers; ``NodeFailed`` with its log if it
        exits or does not answer within ``timeout`` seconds."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "xruntime", "serve", "--config", str(self.config_path)],
                cwd=self.folder,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None:
                raise NodeFailed(f"the node exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise NodeFailed(f"the node did not answer in {timeout:g} s:\n{self.log()}")
            time.sleep(0.1)
        return self

    def _answers(self) -> bool:
        request = urllib.request.Request(
            f"{self.url}/services/rs/XRuntime/getRuntimeInformation",
            data=b"{}",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 20) -> int | None:
        """Stop the node (SIGTERM, then SIGKILL after ``timeout`` s); its exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code, self.process = self.process.returncode, None
        return code

    def log(self) -> str:
        """What the node logged so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def client(self, binding: str = "json") -> Any:
        """A client of this node over ``binding``: "json", "jsonrpc" or "soap"."""
        return client_for(binding, self.url)

    def clients(self) -> list[Any]:
        """One client per binding."""
        return [self.client(binding) for binding in BINDINGS]

    def __enter__(self) -> "Node":
        return self.start() if self.process is None else self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
