"""Finds the services written with the author's API: every ``service`` named in the
entry-point group ``xruntime.services`` of the installed distributions (the Python
convention for plug-ins; the shipped XDemo, XTour and XDima are declared the same way in
setup.cfg).  ``XRUNTIME_SERVICE_MODULES`` (comma-separated modules, e.g.
``acme.xprime``) adds modules that are importable but not installed as a distribution,
for development; they go through the same checks.

Every command (``serve``, ``check-config``, ``wsdl``) and every process of a node asks
``discover()``, so all see the same services; those that serve them ask
``operations.runtime_service.served_services()``, which puts XRuntime, the operation
layer's own service, in front of them.  A broken plug-in is a ``PluginError``:
one line naming the entry point and the distribution it came from, and nothing starts.
"""

import importlib
import os
from dataclasses import dataclass
from functools import cache
from importlib import metadata

from spyne import ComplexModelBase

from ..protocol.typeinfo import complex_types, is_protocol_type, subclasses
from ..protocol.types import NAMESPACE as FRAMEWORK_NAMESPACE
from ..protocol.types import JobProgress
from ..settings.schema import Key
from .service import LongOperation, Service

#: The entry-point group a distribution names its services in.
GROUP = "xruntime.services"
#: Modules holding a module-level ``service``, loaded beside the entry points.
MODULES_VARIABLE = "XRUNTIME_SERVICE_MODULES"


class PluginError(Exception):
    """A service that cannot be served: its message is the one line to show."""


@dataclass(frozen=True)
class Plugin:
    """Where a service comes from: a module, the attribute holding it, and the words
    that name the place to an administrator."""

    module: str
    attribute: str
    origin: str  # e.g. "entry point 'XWords = xwords:service' (distribution xwords 0.1.0)"
    name: str | None = None  # the entry point's name, which must be the service's

    def load(self) -> Service:
        try:
            module = importlib.import_module(self.module)
        except Exception as exc:  # any error of the plug-in's own code at import
            raise PluginError(
                f"{self.origin}: cannot import {self.module}: {type(exc).__name__}: {exc}"
            ) from exc
        found = getattr(module, self.attribute, None)
        if found is None:
            raise PluginError(
                f"{self.origin}: module {self.module} has no {self.attribute!r} "
                "(a Service made with xruntime.author.Service)"
            )
        if not isinstance(found, Service):
            raise PluginError(
                f"{self.origin}: {self.module}.{self.attribute} is a {type(found).__name__}, "
                "not an xruntime.author.Service"
            )
        if self.name is not None and found.name != self.name:
            raise PluginError(
                f"{self.origin}: names the service {self.name!r} but the module's service "
                f"is {found.name!r}; make the entry point's name the service's name"
            )
        return found


def plugins() -> list[Plugin]:
    """Every entry point of ``GROUP`` (by name), then the modules of ``MODULES_VARIABLE``."""
    found = []
    for point in sorted(metadata.entry_points(group=GROUP), key=lambda p: p.name):
        dist = point.dist
        where = (
            f"distribution {dist.name} {dist.version}" if dist is not None else "no distribution"
        )
        module, _, attribute = point.value.partition(":")
        found.append(
            Plugin(
                module.strip(),
                attribute.strip() or "service",
                f"entry point {point.name!r} = {point.value!r} of group {GROUP} ({where})",
                point.name,
            )
        )
    for name in os.environ.get(MODULES_VARIABLE, "").split(","):
        if name.strip():
            found.append(
                Plugin(name.strip(), "service", f"{MODULES_VARIABLE} module {name.strip()!r}")
            )
    return found


def discover() -> dict[str, Service]:
    """Every service found, by name (loaded once per process); ``PluginError`` when a
    plug-in cannot be loaded or two services collide."""
    return _loaded()[0]


def origin_of(name: str) -> str:
    """Where the service ``name`` came from, as ``check-config`` shows it."""
    return _loaded()[1][name]


@cache
def _loaded() -> tuple[dict[str, Service], dict[str, str]]:
    found: dict[str, Service] = {}
    origins: dict[str, str] = {}
    for plugin in plugins():
        service = plugin.load()
        if found.get(service.name) is service:
            continue  # the same module named twice (an entry point and the variable)
        if service.name in found:
            raise PluginError(
                f"two services named {service.name!r}: {plugin.origin} and "
                f"{origins[service.name]}; uninstall or rename one"
            )
        found[service.name] = service
        origins[service.name] = plugin.origin
    check_type_names(found, origins)
    return found, origins


def check_type_names(services: dict[str, Service], origins: dict[str, str]) -> None:
    """Refuse two services that declare a type of one name in one namespace (their
    WSDLs and messages could not tell them apart), a service type in the framework's
    namespace (it would redefine, or stand beside, the protocol's own types), and two
    progress types of one name: XRuntime's answers carry any service's progress, and
    JSON's ``$type`` names a type without its namespace."""
    owners: dict[tuple[str, str], tuple[str, type[ComplexModelBase]]] = {}
    for name, service in services.items():
        for cls in types_of(service):
            key = (cls.get_namespace(), cls.get_type_name())
            if key[0] == FRAMEWORK_NAMESPACE:
                raise PluginError(
                    f"service {name} ({origins[name]}): its type {cls.__module__}."
                    f"{cls.__qualname__} is in the framework's namespace {key[0]} as "
                    f"{key[1]!r}; leave __namespace__ unset so that it takes the service's"
                )
            if issubclass(cls, JobProgress):
                key = ("any service's progress", key[1])
            owner = owners.setdefault(key, (name, cls))
            if owner[1] is not cls:  # one class shared by two services is no clash
                raise PluginError(
                    f"type {{{key[0]}}}{key[1]} is defined by service {name} "
                    f"({origins[name]}) and by service {owner[0]} ({origins[owner[0]]}); "
                    "give one of them another type name"
                )


def types_of(service: Service) -> list[type[ComplexModelBase]]:
    """The complex types a service defines (not the framework's): its requests,
    responses and faults, what they hold, their subtypes and its declared extra types."""
    roots: list[type] = list(service.extra_types)
    for op in service.long_operations.values():
        roots += [op.request, op.response, *op.faults]
    found: dict[type[ComplexModelBase], None] = {}
    for root in roots:
        for cls in complex_types(root):
            if not is_protocol_type(cls):
                found.update(dict.fromkeys(subclasses(cls)))
    return list(found)


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
