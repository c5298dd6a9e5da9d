"""Finds the services: XRuntime plus every package under ``services/`` that defines
a module-level ``service``.  Adding a folder there adds a service; nothing else is
listed anywhere.  Modules named in ``XRUNTIME_SERVICE_MODULES`` (comma-separated, e.g.
``mycompany.xroute``) are loaded too, for services kept outside this repository."""

import importlib
import os
import pkgutil
from functools import cache

from ..settings.schema import Key
from .runtime_service import xruntime
from .service import LongOperation, Service

#: The package of the services shipped with xruntime, found by name: the services sit
#: above this layer (they use the author's API), so nothing here imports them statically.
SHIPPED = "xruntime.services"


@cache
def discover() -> dict[str, Service]:
    """Every service by name, XRuntime first (imported once per process)."""
    found = {xruntime.name: xruntime}
    services = importlib.import_module(SHIPPED)
    for info in sorted(pkgutil.iter_modules(services.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{services.__name__}.{info.name}")
        service = getattr(module, "service", None)
        if service is not None:
            found[service.name] = service
    for name in filter(
        None, (n.strip() for n in os.environ.get("XRUNTIME_SERVICE_MODULES", "").split(","))
    ):
        service = importlib.import_module(name).service
        found[service.name] = service
    return found


def setting_keys() -> dict[str, tuple[Key, ...]]:
    """service name → the keys it declares for its [services.NAME] table, as the
    settings' parser takes them (``config.load(..., service_keys=...)``)."""
    return {name: service.setting_keys() for name, service in discover().items()}


def long_operation(service: str, name: str) -> LongOperation:
    """The LongOperation a worker process is asked to run."""
    return discover()[service].long_operations[name]


def find_long_operation(service: str, name: str) -> LongOperation | None:
    """The LongOperation ``name`` of ``service``, or None when there is none."""
    found = discover().get(service)
    return found.long_operations.get(name) if found is not None else None
