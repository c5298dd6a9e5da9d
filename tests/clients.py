"""One client interface over the three bindings, for the suite that runs on all of them.

``client.call(service, operation, request_dict)`` answers the response in the JSON
form (``"$type"`` on polymorphic values) or raises ``RemoteFault`` with the fault's
type name, message and fields, whichever binding carried it:

* JSON: ``POST /services/rs/<Service>/<operation>`` with requests;
* SOAP: zeep, from the WSDL the server serves, so every call goes through a real,
  independent SOAP client; faults are read from ``<detail>`` with the WSDL's types;
* JSON-RPC: ``POST /services/rpc/<Service>``.
"""
import itertools
import time

import requests
import zeep
import zeep.helpers
from lxml import etree
from zeep.xsd.valueobjects import CompoundValue

BINDINGS = ("json", "soap", "jsonrpc")


class RemoteFault(Exception):
    def __init__(self, type_name, message, fields, status=None, code=None):
        super().__init__(f"{type_name}: {message}")
        self.type = type_name
        self.message = message
        self.fields = fields
        self.status = status          # HTTP status (JSON), or None
        self.code = code              # SOAP faultcode or JSON-RPC error code


class JsonClient:
    name = "json"

    def __init__(self, base):
        self.base = base
        self.session = requests.Session()

    def call(self, service, operation, request=None):
        r = self.session.post(f"{self.base}/services/rs/{service}/{operation}", json=request or {},
                              timeout=70)
        body = r.json()
        if r.status_code != 200:
            info = dict(body["faultInfo"])
            raise RemoteFault(info.pop("$type"), body["message"], info, status=r.status_code)
        return body


class JsonRpcClient:
    name = "jsonrpc"

    def __init__(self, base):
        self.base = base
        self.session = requests.Session()
        self.ids = itertools.count(1)

    def call(self, service, operation, request=None):
        request_id = next(self.ids)
        r = self.session.post(f"{self.base}/services/rpc/{service}", timeout=70, json={
            "jsonrpc": "2.0", "method": operation, "params": request or {}, "id": request_id})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["jsonrpc"] == "2.0" and body["id"] == request_id
        if "error" in body:
            info = dict(body["error"]["data"])
            raise RemoteFault(info.pop("$type"), body["error"]["message"], info,
                              code=body["error"]["code"])
        return body["result"]


class SoapClient:
    name = "soap"

    def __init__(self, base):
        self.base = base
        self.clients = {}

    def client(self, service):
        if service not in self.clients:
            self.clients[service] = zeep.Client(f"{self.base}/services/ws/{service}?wsdl")
        return self.clients[service]

    def call(self, service, operation, request=None):
        client = self.client(service)
        try:
            answer = getattr(client.service, operation)(**(request or {}))
        except zeep.exceptions.Fault as fault:
            raise soap_fault(client, fault)
        data = to_data(answer)
        data.pop("$type", None)
        return data


def soap_fault(client, fault):
    """The typed fault inside ``<detail>``, parsed with the element the WSDL declares."""
    if fault.detail is None or not len(fault.detail):
        raise AssertionError(f"SOAP fault without detail: {fault.message}")
    elem = fault.detail[0]
    typed = client.wsdl.types.get_element(elem.tag).parse(elem, client.wsdl.types)
    fields = {k: v for k, v in zeep.helpers.serialize_object(typed).items() if v is not None}
    return RemoteFault(etree.QName(elem).localname, fault.message, fields, code=fault.code)


def to_data(value):
    """A zeep answer in the JSON codec's form: "$type" on every object, no empty lists."""
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


def make_client(binding, base):
    return {"json": JsonClient, "soap": SoapClient, "jsonrpc": JsonRpcClient}[binding](base)


# ------------------------------------------------------------------ XDemo through any client

TERMINAL = ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN")


def start(client, **request):
    return client.call("XDemo", "startSimulate", request)


def watch(client, job_id, **periods):
    return client.call("XRuntime", "watchJob", dict(id=job_id, **periods))


def wait_status(client, job_id, wanted, timeout=30):
    """Watch until the job is ``wanted``; fails at once if it ends otherwise."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = watch(client, job_id, progressUpdatePeriod=250, maximumPollingPeriod=500)
        if job["status"] == wanted:
            return job
        assert job["status"] not in TERMINAL, f"{job['status']} while waiting for {wanted}"
    raise AssertionError(f"never {wanted}")


def wait_done(client, job_id, timeout=60):
    """Watch until the job is terminal; answers the last Job."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = watch(client, job_id, progressUpdatePeriod=250, maximumPollingPeriod=5000)
        if job["status"] in TERMINAL:
            return job
    raise AssertionError("not done")
