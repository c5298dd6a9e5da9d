"""One client interface over the three bindings.

``client.call(service, operation, request)`` sends a request (a dict in the JSON form)
and answers the response in the JSON form (``"$type"`` on polymorphic values), or
raises ``Fault`` with the fault's type name, message and fields, whichever binding
carried it:

* ``JsonClient``: ``POST /services/rs/<Service>/<operation>``;
* ``JsonRpcClient``: ``POST /services/rpc/<Service>``, JSON-RPC 2.0;
* ``SoapClient``: zeep, built from the WSDL the node serves, so that every call goes
  through an independent SOAP client; a fault is read from ``<detail>`` with the
  WSDL's types.

``requests`` and ``zeep`` are imported when a client is made, not with this module:
``pip install 'xruntime[testing]'`` brings them.
"""

import itertools
from typing import Any

#: The bindings a node serves, as ``client_for`` names them.
BINDINGS = ("json", "jsonrpc", "soap")
#: A watch is held up to 50 s by the server (docs/protocol.md §4): wait longer.
TIMEOUT = 70


class Fault(Exception):
    """A fault the node answered: ``type`` (e.g. "InvalidValueFault"), ``message``, the
    ``fields`` of its faultInfo, the HTTP ``status`` (JSON) and the SOAP faultcode or
    JSON-RPC error ``code``."""

    def __init__(
        self,
        type_name: str,
        message: str,
        fields: dict[str, Any],
        status: int | None = None,
        code: Any = None,
    ) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type = type_name
        self.message = message
        self.fields = fields
        self.status = status
        self.code = code


def _session(auth: tuple[str, str] | None) -> Any:
    import requests

    session = requests.Session()
    session.auth = auth  # (user, token): HTTP Basic on every call, with [auth] on
    return session


class JsonClient:
    name = "json"

    def __init__(self, base: str, auth: tuple[str, str] | None = None) -> None:
        self.base = base
        self.session = _session(auth)

    def call(self, service: str, operation: str, request: dict[str, Any] | None = None) -> Any:
        answer = self.session.post(
            f"{self.base}/services/rs/{service}/{operation}", json=request or {}, timeout=TIMEOUT
        )
        body = answer.json()
        if answer.status_code != 200:
            info = dict(body["faultInfo"])
            raise Fault(info.pop("$type"), body["message"], info, status=answer.status_code)
        return body


class JsonRpcClient:
    name = "jsonrpc"

    def __init__(self, base: str, auth: tuple[str, str] | None = None) -> None:
        self.base = base
        self.session = _session(auth)
        self.ids = itertools.count(1)

    def call(self, service: str, operation: str, request: dict[str, Any] | None = None) -> Any:
        request_id = next(self.ids)
        answer = self.session.post(
            f"{self.base}/services/rpc/{service}",
            timeout=TIMEOUT,
            json={"jsonrpc": "2.0", "method": operation, "params": request or {}, "id": request_id},
        )
        if answer.status_code != 200:
            raise AssertionError(f"JSON-RPC answered HTTP {answer.status_code}: {answer.text}")
        body = answer.json()
        if body.get("jsonrpc") != "2.0" or body.get("id") != request_id:
            raise AssertionError(f"not the JSON-RPC answer to request {request_id}: {body}")
        if "error" in body:
            info = dict(body["error"]["data"])
            raise Fault(
                info.pop("$type"), body["error"]["message"], info, code=body["error"]["code"]
            )
        return body["result"]


class SoapClient:
    """zeep, one client per service, from ``<base>/services/ws/<Service>?wsdl``."""

    name = "soap"

    def __init__(self, base: str, auth: tuple[str, str] | None = None) -> None:
        self.base = base
        self.auth = auth
        self.clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        """The zeep client of ``service`` (made from its WSDL at first use)."""
        if service not in self.clients:
            import zeep
            import zeep.transports

            self.clients[service] = zeep.Client(
                f"{self.base}/services/ws/{service}?wsdl",
                transport=zeep.transports.Transport(session=_session(self.auth)),
            )
        return self.clients[service]

    def call(self, service: str, operation: str, request: dict[str, Any] | None = None) -> Any:
        import zeep.exceptions

        client = self.client(service)
        try:
            answer = getattr(client.service, operation)(**(request or {}))
        except zeep.exceptions.Fault as fault:
            raise soap_fault(client, fault) from fault
        data = to_data(answer)
        if isinstance(data, dict):  # (an answer of one list field is that list: zeep)
            data.pop("$type", None)
        return data


def soap_fault(client: Any, fault: Any) -> Fault:
    """The typed fault inside ``<detail>``, parsed with the element the WSDL declares."""
    import zeep.helpers
    from lxml import etree

    if fault.detail is None or not len(fault.detail):
        raise AssertionError(f"SOAP fault without detail: {fault.message}")
    element = fault.detail[0]
    typed = client.wsdl.types.get_element(element.tag).parse(element, client.wsdl.types)
    fields = {k: v for k, v in zeep.helpers.serialize_object(typed).items() if v is not None}
    return Fault(etree.QName(element).localname, fault.message, fields, code=fault.code)


def to_data(value: Any) -> Any:
    """A zeep answer in the JSON form: "$type" on every object, no empty lists."""
    from zeep.xsd.valueobjects import CompoundValue

    if isinstance(value, CompoundValue):
        data = {"$type": value._xsd_type.name}
        for key in value:
            item = to_data(value[key])
            if item is not None and item != []:
                data[key] = item
        return data
    if isinstance(value, list):
        return [to_data(v) for v in value]
    return value


_CLIENTS = {"json": JsonClient, "jsonrpc": JsonRpcClient, "soap": SoapClient}


def client_for(binding: str, base: str, auth: tuple[str, str] | None = None) -> Any:
    """A client of the node at ``base`` over ``binding`` (one of ``BINDINGS``)."""
    return _CLIENTS[binding](base, auth)
