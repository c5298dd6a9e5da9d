"""``/readyz``: whether this node should be sent new jobs, for a load balancer.

No login (a load balancer has no token) and nothing about anyone's jobs: a list of
checks, each ``ok`` or not with a line why; 200 when all pass, 503 otherwise.  Cheap
enough to be called every second (a ``statvfs``).  The check today: the room left on
the job store's disk (``store.disk_room``; under ``[database] min_free_bytes`` the node
refuses starts).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ..settings.model import Settings
from ..store.disk_room import DiskRoom
from ..web.asgi import Page, answer, refuse_method
from ..web.asgi_types import Receive, Scope, Send


class Readiness(Page):
    """``/readyz``: ``{"ready": bool, "checks": [{"name", "ok", "detail"}]}``."""

    admin_only = False
    needs_login = False

    def __init__(self, room: DiskRoom, settings: Callable[[], Settings]) -> None:
        self.room, self.settings = room, settings

    def checks(self) -> list[dict[str, object]]:
        floor = self.settings().min_free_bytes
        shortfall = self.room.shortfall(floor)
        free = self.room.free_bytes()
        detail = shortfall or (
            "not measured here (PostgreSQL)"
            if free is None
            else f"{free} bytes free (floor: {floor})"
        )
        return [{"name": "disk", "ok": shortfall is None, "detail": detail}]

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, admitted: Callable[[], bool]
    ) -> None:
        if await refuse_method(scope, send):
            return
        checks = self.checks()
        ready = all(check["ok"] for check in checks)
        body = json.dumps({"ready": ready, "checks": checks}).encode() + b"\n"
        await answer(
            scope,
            send,
            200 if ready else 503,
            "application/json",
            body,
            [(b"cache-control", b"no-store")],
        )
