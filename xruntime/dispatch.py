"""From (service, operation, typed request) to typed response: shared by all bindings.

A binding finds the operation here, decodes the request into ``operation.request``,
calls ``invoke`` and encodes what comes back (or the fault raised).  Nothing about
jobs is decided in a binding.
"""
from .protocol import codec
from .protocol.faults import InvalidRequestFault, ServiceNotConfiguredFault
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

    def find(self, service: str, name: str):
        """The Operation, or InvalidRequestFault naming what does not exist."""
        op = self.operation(service, name)
        if op is None:
            what = (f"the service {service} has no operation {name}" if self.has_service(service)
                    else f"there is no service {service}")
            raise InvalidRequestFault(what, hint="Check the operation's name and its service.")
        return op

    def call_json(self, op, data) -> str:
        """Plain request data of any binding → the response as JSON text (the codec's
        form).  Validation is the codec's, so every binding refuses the same input the
        same way.  A fetch and the synchronous form answer the text the worker stored as
        it is: a large result is never built as spyne objects on the server's threads."""
        self.check_enabled(op.service)
        request = codec.decode(data, op.request)
        if op.kind == FETCH:
            return self.jobs.fetch_json(op.target, request.id)
        if op.kind == RUN:
            return self.jobs.run(op.target, request)
        if op.kind == START:
            answer = self.jobs.start(op.target, request)
        elif op.kind == CALL:
            answer = op.target(self.jobs, request)
        else:
            raise AssertionError(op.kind)
        return codec.dumps(codec.encode(answer, op.response))
