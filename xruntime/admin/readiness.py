"""``/healthz`` and ``/readyz``: for a load balancer, an orchestrator, a monitor.

``/healthz`` says the HTTP process answers: 200 ``ok``, nothing asked of anything
else (an orchestrator restarts a node whose process hangs).  ``/readyz`` says whether
this node should be sent requests: each check ``ok`` or not with a line why, 200 when
all pass, 503 otherwise:

- ``store``: the database answers a trivial question within ``STORE_BOUND_S``;
- ``workers``: the node's worker processes are all up (the main process says so on the
  pipe, ``NodeHealth``);
- ``node``: the node is not shutting down (its jobs are being handed back);
- ``disk``: the job store's disk has ``[database] min_free_bytes`` of room
  (``store.disk_room``; under it the node refuses starts).

Neither needs a login (a load balancer has no token), and neither tells anything of
anyone's jobs; neither is counted in the request metrics.  Cheap enough to be called
every second: a ``SELECT 1`` on a pooled connection and a ``statvfs``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..settings.model import Settings
from ..store import StoreUnavailable
from ..store.disk_room import DiskRoom
from ..support.blocking import blocking
from ..web.asgi import FixedPage, Page, answer, refuse_method
from ..web.asgi_types import Receive, Scope, Send
from .node_health import NodeHealth

if TYPE_CHECKING:
    from ..store import JobStore

#: s the database has to answer ``/readyz``'s question
STORE_BOUND_S = 2.0


class Liveness(FixedPage):
    """``/healthz``: 200 ``ok`` while the process answers."""

    admin_only = False
    needs_login = False
    body = b"ok\n"


class Readiness(Page):
    """``/readyz``: ``{"ready": bool, "checks": [{"name", "ok", "detail"}]}``."""

    admin_only = False
    needs_login = False

    def __init__(
        self,
        store: JobStore,
        room: DiskRoom,
        settings: Callable[[], Settings],
        health: Callable[[], NodeHealth],
    ) -> None:
        self.store, self.room, self.settings, self.health = store, room, settings, health

    async def checks(self) -> list[dict[str, object]]:
        health = self.health()
        return [
            await self._store(),
            _check(
                "workers",
                0 < health.workers_up == health.workers,
                f"{health.workers_up} of {health.workers} worker processes up",
            ),
            _check(
                "node",
                not health.closing,
                "shutting down: its jobs are handed back" if health.closing else "serving",
            ),
            self._disk(),
        ]

    async def _store(self) -> dict[str, object]:
        try:
            await asyncio.wait_for(blocking(self.store.ping), STORE_BOUND_S)
        except TimeoutError:
            return _check("store", False, f"the database did not answer within {STORE_BOUND_S:g} s")
        except StoreUnavailable as exc:
            return _check("store", False, str(exc).splitlines()[0])
        return _check("store", True, "the database answers")

    def _disk(self) -> dict[str, object]:
        floor = self.settings().min_free_bytes
        shortfall = self.room.shortfall(floor)
        free = self.room.free_bytes()
        detail = shortfall or (
            "not measured here (PostgreSQL)"
            if free is None
            else f"{free} bytes free (floor: {floor})"
        )
        return _check("disk", shortfall is None, detail)

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, admitted: Callable[[], bool]
    ) -> None:
        if await refuse_method(scope, send):
            return
        checks = await self.checks()
        ready = all(check["ok"] for check in checks)
        body = json.dumps({"ready": ready, "checks": checks}).encode() + b"\n"
        await answer(
            scope,
            send,
            200 if ready else 503,
            "application/json",
            body,
        )


def _check(name: str, ok: bool, detail: str) -> dict[str, object]:
    return {"name": name, "ok": ok, "detail": detail}
