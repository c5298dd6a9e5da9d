"""One client interface over the three bindings, for the suite that runs on all of them.

``client.call(service, operation, request_dict)`` answers the response in the JSON
form (``"$type"`` on polymorphic values) or raises ``RemoteFault`` with the fault's
type name, message and fields, whichever binding carried it:

* JSON: ``POST /services/rs/<Service>/<operation>`` with requests;
* SOAP: zeep, from the WSDL the server serves, so every call goes through a real,
  independent SOAP client; faults are read from ``<detail>`` with the WSDL's types;
* JSON-RPC: ``POST /services/rpc/<Service>``.

Three more SOAP clients, as users run them, for tests/e2e/test_soap_clients.py: suds
(``SudsClient``) and node.js' npm ``soap`` and ``strong-soap`` (``NodeSoapClient``,
through tests/node/bridge.js).  Every SOAP client keeps the envelopes it sent
(``sent``: [(service, bytes)]) so that a test can hold them against the WSDL's schemas.
"""

import json
import os
import select
import subprocess
import time
from urllib.parse import urljoin

import requests
import requests.auth
import suds.client
import suds.plugin
import suds.sudsobject
import suds.transport.http
import suds.transport.https
import zeep
import zeep.helpers
import zeep.plugins
import zeep.transports
from lxml import etree

from xruntime.testing.clients import Fault, JsonClient, JsonRpcClient, soap_fault, to_data

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")

BINDINGS = ("json", "soap", "jsonrpc")


#: One exception for a fault from any binding, and the JSON and JSON-RPC clients: the
#: kit service authors test with (xruntime.testing), so that the suite tests it too.
RemoteFault = Fault


def wsdl_documents(url, **kwargs) -> dict:
    """{address: parsed document} of a WSDL and every schema document it imports,
    theirs and so on, fetched as a client generator fetches them (relative addresses
    against the importing document's)."""
    found, pending = {}, [url]
    while pending:
        address = pending.pop()
        if address in found:
            continue
        answer = requests.get(address, timeout=10, **kwargs)
        assert answer.status_code == 200, (address, answer.status_code, answer.text[:200])
        found[address] = root = etree.fromstring(answer.content)
        for imported in root.iter("{http://www.w3.org/2001/XMLSchema}import"):
            if imported.get("schemaLocation"):
                pending.append(urljoin(address, imported.get("schemaLocation")))
    return found


class _WsdlClient:
    """A SOAP library's client per service, built from the WSDL the server serves;
    answers in the JSON codec's form, faults as RemoteFault.  Subclasses name the
    library: ``build`` (recording what it sends in ``sent``), its ``Fault`` exception,
    ``typed_fault`` and ``data``."""

    def __init__(self, base, auth=None):
        self.base = base
        self.auth = auth  # (user, token), sent as the library sends it
        self.clients = {}
        self.sent = []

    def client(self, service):
        if service not in self.clients:
            self.clients[service] = self.build(f"{self.base}/services/ws/{service}?wsdl", service)
        return self.clients[service]

    def call(self, service, operation, request=None):
        client = self.client(service)
        try:
            answer = getattr(client.service, operation)(**(request or {}))
        except self.Fault as fault:
            raise self.typed_fault(client, fault) from fault
        data = self.data(answer)
        if isinstance(data, dict):  # (an answer of one list field is that list: zeep)
            data.pop("$type", None)
        return data


class SoapClient(_WsdlClient):
    """zeep."""

    name = "soap"
    Fault = zeep.exceptions.Fault

    def build(self, url, service):
        session = requests.Session()
        if self.auth is not None:  # with every request, the WSDL's too
            session.auth = requests.auth.HTTPBasicAuth(*self.auth)
        return zeep.Client(
            url,
            plugins=[_ZeepRecorder(self.sent, service)],
            transport=zeep.transports.Transport(session=session),
        )

    def typed_fault(self, client, fault):
        return soap_fault(client, fault)

    def data(self, answer):
        return to_data(answer)


class _ZeepRecorder(zeep.plugins.Plugin):
    def __init__(self, sent, service):
        self.sent, self.service = sent, service

    def egress(self, envelope, http_headers, operation, binding_options):
        self.sent.append((self.service, etree.tostring(envelope)))
        return envelope, http_headers


class SudsClient(_WsdlClient):
    """suds-community.  With ``auth``, suds' two HttpAuthenticated transports:
    ``challenge`` (suds.transport.https', suds' own default for a username and
    password) sends the credentials only in answer to a 401 challenge; without it
    (suds.transport.http's) they go with every request."""

    name = "suds"
    Fault = suds.WebFault

    def __init__(self, base, auth=None, challenge=True):
        super().__init__(base, auth)
        self.challenge = challenge

    def build(self, url, service):
        extra = {}
        if self.auth is not None:
            transport = (
                suds.transport.https.HttpAuthenticated
                if self.challenge
                else suds.transport.http.HttpAuthenticated
            )
            extra["transport"] = transport(username=self.auth[0], password=self.auth[1])
        return suds.client.Client(
            url, cache=None, plugins=[_SudsRecorder(self.sent, service)], **extra
        )

    def typed_fault(self, client, fault):
        return suds_fault(fault.fault)

    def data(self, answer):
        return suds_data(answer)


class _SudsRecorder(suds.plugin.MessagePlugin):
    def __init__(self, sent, service):
        self.sent, self.service = sent, service

    def sending(self, context):
        self.sent.append((self.service, bytes(context.envelope)))


def suds_data(value):
    """A suds answer in the JSON codec's form: "$type" (its class: the xsi:type) on
    every object."""
    if isinstance(value, suds.sudsobject.Object):
        data = {"$type": type(value).__name__}
        data.update((key, suds_data(item)) for key, item in value)
        return data
    if isinstance(value, list):
        return [suds_data(v) for v in value]
    return str(value) if isinstance(value, str) else value


def suds_fault(fault):
    """The typed fault suds read from ``<detail>``."""
    detail = getattr(fault, "detail", None)
    if detail is None:
        raise AssertionError(f"SOAP fault without detail: {fault.faultstring}")
    [(_, typed)] = list(detail)
    fields = {k: v for k, v in suds_data(typed).items() if v is not None}
    return RemoteFault(
        fields.pop("$type"), str(fault.faultstring), fields, code=str(fault.faultcode)
    )


class NodeSoapClient:
    """A SOAP client of node.js (``package`` "soap" or "strong-soap", installed in
    tests/node), driven through tests/node/bridge.js in one node process."""

    def __init__(self, base, package):
        self.name = package
        self.base = base
        self.sent = []
        self.proc = subprocess.Popen(
            ["node", "bridge.js", package, base],
            cwd=NODE_DIR,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def call(self, service, operation, request=None, timeout=90):
        self.proc.stdin.write(
            json.dumps({"service": service, "operation": operation, "request": request or {}})
            + "\n"
        )
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise AssertionError(f"node {self.name}: no answer to {operation} in {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"node {self.name} ended (exit code {self.proc.wait()})")
        out = json.loads(line)
        if out.get("sent"):
            self.sent.append((service, out["sent"].encode("utf-8")))
        if "fault" in out:
            fault = out["fault"]
            raise RemoteFault(fault["type"], fault["message"], fault["fields"], code=fault["code"])
        if "error" in out:
            raise AssertionError(f"node {self.name}: {out['error']}")
        return out["answer"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)


def make_client(binding, base, auth=None):
    return {"json": JsonClient, "soap": SoapClient, "jsonrpc": JsonRpcClient}[binding](base, auth)


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
