"""``/metrics``: the node's Prometheus metrics in the text format, for a scrape.

It adds up what every process of the node recorded (``xruntime.support.metrics``, from the
multiprocess folder) and reads the rest from the store at scrape time.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from ..protocol.states import Status
from ..support.blocking import blocking
from ..support.metrics import MULTIPROC_ENV, recorded
from ..web.asgi import Page, answer, refuse_method
from ..web.asgi_types import Receive, Scope, Send

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ..settings.config import Settings
    from ..store import JobStore


class StoreCollector:
    """Gauges read from the store at scrape time."""

    def __init__(self, store: JobStore, node: str, settings: Callable[[], Settings]) -> None:
        self.store = store
        self.node = node
        self.settings = settings  # a callable answering the settings in force

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        from .. import __version__

        counts = self.store.counts_by_service()
        busy = self.store.busy_workers(self.node)
        workers = self.settings().workers
        info = GaugeMetricFamily(
            "xruntime_node_info", "This node: its name and version.", labels=["node", "version"]
        )
        info.add_metric([self.node, __version__], 1)
        yield info
        jobs = GaugeMetricFamily(
            "xruntime_jobs",
            "Stored jobs per service and status (every node's).",
            labels=["service", "status"],
        )
        queued = GaugeMetricFamily(
            "xruntime_queue_length",
            "Jobs waiting for a worker, per service (with those waiting for a retry).",
            labels=["service"],
        )
        for (service, status), count in sorted(counts.items()):
            jobs.add_metric([service, status], count)
        for service in sorted({service for service, _ in counts}):  # 0 too, once it has jobs
            queued.add_metric([service], counts.get((service, Status.QUEUING), 0))
        yield jobs
        yield queued
        slots = GaugeMetricFamily(
            "xruntime_workers", "This node's worker processes, busy or idle.", labels=["state"]
        )
        slots.add_metric(["busy"], busy)
        slots.add_metric(["idle"], max(0, workers - busy))
        yield slots


class MetricsPage(Page):
    """``/metrics`` in Prometheus' text format; admin-only with accounts on (a scrape
    config sends an admin's token as a bearer token)."""

    def __init__(self, store: JobStore, node: str, settings: Callable[[], Settings]) -> None:
        self.store_collector = StoreCollector(store, node, settings)

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        folder = os.environ.get(MULTIPROC_ENV)
        if folder:
            registry = CollectorRegistry()
            registry.register(_NodeProcesses(folder))
        else:  # one process (a test's app): its own
            registry = CollectorRegistry()
            registry.register(_Recorded())
        registry.register(self.store_collector)
        return generate_latest(registry), CONTENT_TYPE_LATEST

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, admitted: Callable[[], bool]
    ) -> None:
        if not await refuse_method(scope, send):
            body, content_type = await blocking(self.exposition)
            await answer(scope, send, 200, content_type, body)


class _NodeProcesses:
    """What every process of the node recorded: prometheus_client's files of the
    multiprocess folder, merged, but for a file a process has just created and not yet
    sized, which prometheus_client takes for a corrupt one, failing the whole scrape
    (client_python #1199: a scrape answered 500 when another HTTP process recorded its
    first metric at that moment).  Such a file holds nothing yet."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.multiprocess import MultiProcessCollector

        files = [path for path in glob.glob(os.path.join(self.folder, "*.db")) if _sized(path)]
        return MultiProcessCollector.merge(files, accumulate=True)


def _sized(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except FileNotFoundError:  # (a live gauge's file, its process gone)
        return False


class _Recorded:
    """This process's recorded metrics, when there is no multiprocess folder."""

    def collect(self) -> Iterator[Metric]:
        from prometheus_client import REGISTRY

        names = {m._name for m in recorded().values()}
        for family in REGISTRY.collect():
            if family.name in names:
                yield family
