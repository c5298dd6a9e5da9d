"""From (service, operation, typed request) to typed response: shared by all bindings.

A binding finds the operation here, decodes the request into ``operation.request``,
calls ``invoke`` and encodes what comes back (or the fault raised).  Nothing about
jobs is decided in a binding.
"""
from .protocol.faults import ServiceNotConfiguredFault
from .registry import discover
from .service import CALL, FETCH, RUN, START


class Dispatcher:
    def __init__(self, jobs):
        self.jobs = jobs
        self.services = discover()
        self._operations = {name: svc.operations() for name, svc in self.services.items()}

    def operation(self, service: str, name: str):
        """The Operation, or None when the service or operation does not exist."""
        return self._operations.get(service, {}).get(name)

    def has_service(self, service: str) -> bool:
        return service in self._operations

    def check_enabled(self, service: str) -> None:
        if not self.jobs.settings().service_enabled(service):
            raise ServiceNotConfiguredFault(f"the service {service} is not configured on this server",
                                            service=service)

    def invoke(self, op, request):
        self.check_enabled(op.service)
        if op.kind == START:
            return self.jobs.start(op.target, request)
        if op.kind == FETCH:
            return self.jobs.fetch(op.target, request.id)
        if op.kind == RUN:
            return self.jobs.run(op.target, request)
        if op.kind == CALL:
            return op.target(self.jobs, request)
        raise AssertionError(op.kind)
