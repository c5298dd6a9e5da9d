"""How the client commands draw jobs: a rich progress bar on a terminal, plain lines
when piped, and the ``xruntime jobs`` table.  Every bar and text reads a progress
through ``progress_view``, as the status page does."""

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..protocol import states
from ..protocol.progress_view import view_of


class LineView:
    """One plain line on stderr per change of status or progress, for logs and pipes;
    watching ``several`` jobs, each line begins with its job's id."""

    def __init__(self, several: bool = False) -> None:
        self.several = several
        self.last: dict[str, str] = {}  # job id → its last line

    def show(self, job: Mapping[str, Any]) -> None:
        view = view_of(job.get("progress"))
        line = " ".join(part for part in (job["status"], view.text if view else "") if part)
        if line != self.last.get(job["id"]):
            self.last[job["id"]] = line
            prefix = f"{job['id']} " if self.several else ""
            print(
                f"{prefix}{line} ({duration(job.get('elapsedTime', 0))})",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        pass


class BarView:
    """A progress bar on the terminal (stderr): status, bar, progress text, the job's
    elapsed time. A progress without an end (XTour's) shows a pulsing bar.  Watching
    ``several`` jobs, a bar each, led by the job's id."""

    def __init__(self, several: bool = False) -> None:
        ids = [TextColumn("{task.description}", markup=False)] if several else []
        self.progress = Progress(
            *ids,
            TextColumn("{task.fields[status]:<9}", markup=False),
            JobBarColumn(),
            TextColumn("{task.fields[text]}", markup=False),
            JobElapsedColumn(),
            console=Console(stderr=True),
            refresh_per_second=10,
        )
        self.tasks: dict[str, TaskID] = {}  # job id → its bar

    def show(self, job: Mapping[str, Any]) -> None:
        view = view_of(job.get("progress"))
        fraction = view.fraction if view else None
        if job["status"] == states.SUCCEEDED and fraction is None:
            fraction = 1.0
        fields: dict[str, Any] = dict(
            status=job["status"],
            text=view.text if view else "",
            elapsed=(job.get("elapsedTime", 0), time.monotonic(), job["status"] in states.ACTIVE),
        )
        total = None if fraction is None else 1000
        completed = 0 if fraction is None else round(fraction * 1000)
        task = self.tasks.get(job["id"])
        if task is None:
            if not self.tasks:
                self.progress.start()
            self.tasks[job["id"]] = self.progress.add_task(
                job["id"], total=total, completed=completed, **fields
            )
        else:
            self.progress.update(task, total=total, completed=completed, **fields)

    def close(self) -> None:
        if self.tasks:
            self.progress.refresh()
            self.progress.stop()


class JobBarColumn(BarColumn):
    """The bar, coloured by the job's status: green once it succeeded, red when it
    failed or was deleted (rich's own finished colour is a dim grey on many terminals)."""

    COLOURS = {
        states.SUCCEEDED: "green",
        states.FAILED: "red",
        states.DELETED: "red",
        states.UNKNOWN: "red",
    }

    def render(self, task: Task) -> ProgressBar:
        colour = self.COLOURS.get(task.fields["status"], "magenta")
        self.complete_style = self.finished_style = colour
        return super().render(task)


class JobElapsedColumn(ProgressColumn):
    """The job's elapsed time as the server counts it (from its queuing), running on
    between answers while the job is live."""

    def render(self, task: Task) -> Text:
        elapsed_ms, at, live = task.fields["elapsed"]
        if live:
            elapsed_ms += (time.monotonic() - at) * 1000
        return Text(duration(int(elapsed_ms)), style="progress.elapsed")


COLUMNS = (
    "id",
    "service",
    "operation",
    "status",
    "user",
    "queuedAt",
    "progress",
    "attempts",
    "fetched",
)


def print_jobs(jobs: Sequence[Mapping[str, Any]]) -> None:
    """A table on a terminal; tab-separated lines with a header when piped (every
    column, full values, for scripts)."""
    if not sys.stdout.isatty():
        for row in [list(COLUMNS)] + [[_cell(job, name) for name in COLUMNS] for job in jobs]:
            print("\t".join(row))
        return
    if not jobs:
        print("no jobs")
        return
    shown = {
        "user": any(job.get("user") for job in jobs),  # when accounts are on
        "attempts": any((job.get("attempts") or 0) > 1 for job in jobs),
    }  # after retries
    columns = [name for name in COLUMNS if shown.get(name, True)]
    today = time.strftime("%Y-%m-%d", time.gmtime())
    table = Table(box=None, header_style="bold")
    for name in columns:  # the id and status whole, others give way
        table.add_column(
            {"queuedAt": "queued", "attempts": "tries"}.get(name, name),
            no_wrap=True,
            min_width={"id": 36, "status": 9}.get(name),
        )
    for job in jobs:
        row = [_cell(job, name) for name in columns]
        if "queuedAt" in columns:  # UTC: 22:34:46 today, 11-23 22:34 before
            at = columns.index("queuedAt")
            row[at] = (
                row[at][11:19] if row[at].startswith(today) else row[at][5:16].replace("T", " ")
            )
        table.add_row(*map(Text, row))  # a value is text, never rich markup
    Console().print(table)


def _cell(job: Mapping[str, Any], name: str) -> str:
    value = job.get(name)
    if name == "progress":
        view = view_of(value)
        return view.text if view else ""
    if name == "user":
        return value or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)


def duration(ms: int) -> str:
    """A duration as a person reads it: 3.2 s, 4:05, 1:02:03."""
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, secs = divmod(ms // 1000, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
