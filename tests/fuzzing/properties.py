"""What every answer must be, whatever was sent.

* It comes within ``ANSWER_WITHIN``; a raw HTTP request may instead have its connection
  closed, never left hanging.  A well-formed POST to a binding is always answered.
* It is the binding's own form: JSON, a status of 4xx/5xx with ``{"message": ...,
  "faultInfo": {"$type": ...}}``; JSON-RPC, one answer per request that is not a
  notification, each a ``result`` or an ``error`` with its code and ``data``; SOAP, a
  ``soap:Fault`` envelope with HTTP 500 — or a success, when the input happened to be
  valid.  A raw HTTP answer with HTTP 500 is one of these faults.
* It is never ``InternalErrorFault`` (client input is no server bug), and no body
  shows a traceback.
* The server closes its side of the connection once the client is done.

``judge(case, outcome)`` lists what is wrong (nothing, when all is well) and names the
answer, for counting answers of each kind.
"""

import json

from lxml import etree

from .exchange import ANSWER_WITHIN
from .node import MAX_REQUEST_BYTES
from .strategies import Raw

SOAP_ENV = "{http://schemas.xmlsoap.org/soap/envelope/}"
INTERNAL = "InternalErrorFault"
TRACEBACK_MARKS = (b"Traceback (most recent call last)", b'File "')
_XML = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)


class Wrong(Exception):
    """The answer is not what the binding must answer."""


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def strict_json(outcome):
    """The answer's body as JSON, as a strict parser reads it (UTF-8, no NaN or
    Infinity), sent as JSON."""
    if not outcome.content_type.startswith("application/json"):
        raise Wrong(f"the answer is {outcome.content_type or 'of no content type'}, not JSON")
    try:
        return json.loads(outcome.body.decode("utf-8"), parse_constant=_no_constant)
    except ValueError as exc:
        raise Wrong(f"the body is not JSON ({exc}): {outcome.body[:200]!r}") from exc


def _json_fault(status, data) -> str:
    if not 400 <= status <= 599:
        raise Wrong(f"a fault with HTTP {status}")
    if not (
        isinstance(data, dict)
        and isinstance(data.get("message"), str)
        and isinstance(data.get("faultInfo"), dict)
        and data["faultInfo"].get("$type")
    ):
        raise Wrong(f"not a JSON fault: {str(data)[:300]}")
    return data["faultInfo"]["$type"]


def json_answer(case, outcome) -> list:
    """The fault types of a JSON binding's answer ([] for a success)."""
    data = strict_json(outcome)
    if outcome.status == 200:
        if not isinstance(data, dict) or "faultInfo" in data:
            raise Wrong(f"a success that is no response object: {str(data)[:300]}")
        return []
    return [_json_fault(outcome.status, data)]


def _sent_ids(payload):
    """The ids of the requests in ``payload`` (JSON-RPC), as (type, value)."""
    items = payload if isinstance(payload, list) else [payload]
    return {
        (type(i["id"]), i["id"])
        for i in items
        if isinstance(i, dict) and isinstance(i.get("id"), (int, float, str))
    }


def _is_notification(item) -> bool:
    return (
        isinstance(item, dict)
        and item.get("jsonrpc") == "2.0"
        and type(item.get("method")) is str
        and "id" not in item
    )


def _expected_answers(payload) -> int:
    if isinstance(payload, list):
        return sum(not _is_notification(item) for item in payload) if payload else 1
    return 0 if _is_notification(payload) else 1


def _rpc_error(answer) -> str:
    error = answer["error"]
    if not (
        isinstance(error, dict)
        and type(error.get("code")) is int
        and isinstance(error.get("message"), str)
        and isinstance(error.get("data"), dict)
        and error["data"].get("$type")
    ):
        raise Wrong(f"not a JSON-RPC error object: {str(answer)[:300]}")
    return error["data"]["$type"]


def jsonrpc_answer(case, outcome) -> list:
    """The fault types of a JSON-RPC answer: one answer per request that is not a
    notification, or one error for a body that is no request at all."""
    if outcome.status == 204:
        if outcome.body or (case.payload is not None and _expected_answers(case.payload)):
            raise Wrong(
                f"HTTP 204 for requests that are not all notifications: {outcome.body[:200]!r}"
            )
        return []
    if outcome.status != 200:
        raise Wrong(f"HTTP {outcome.status} from JSON-RPC")
    data = strict_json(outcome)
    answers = data if isinstance(data, list) else [data]
    for answer in answers:
        if not (
            isinstance(answer, dict)
            and answer.get("jsonrpc") == "2.0"
            and "id" in answer
            and ("result" in answer) != ("error" in answer)
        ):
            raise Wrong(f"not a JSON-RPC answer: {str(answer)[:300]}")
    faults = [_rpc_error(a) for a in answers if "error" in a]
    whole = (
        isinstance(data, dict)
        and data["id"] is None
        and "error" in data
        and data["error"]["code"] in (-32700, -32600)
    )
    if whole or case.payload is None or _has_raw(case.payload):
        return faults  # the body as a whole was refused, or cannot be told
    expected = _expected_answers(case.payload)
    if isinstance(case.payload, list) != isinstance(data, list) or len(answers) != expected:
        raise Wrong(f"{len(answers)} answers ({type(data).__name__}) to {expected} requests")
    sent = _sent_ids(case.payload)
    for answer in answers:
        if answer["id"] is not None and (type(answer["id"]), answer["id"]) not in sent:
            raise Wrong(f"an answer with the id {answer['id']!r}, which no request had")
    return faults


def _has_raw(payload) -> bool:
    """Whether a request's id is written as raw JSON text (its value as read cannot be
    known here: 1E+2 is 100.0)."""
    items = payload if isinstance(payload, list) else [payload]
    return isinstance(payload, Raw) or any(
        isinstance(i, dict) and isinstance(i.get("id"), Raw) for i in items
    )


def soap_answer(case, outcome) -> list:
    """The fault types of a SOAP answer: an envelope whose body holds a response, or
    (with HTTP 500) a soap:Fault with one typed element in its detail."""
    if outcome.status not in (200, 500) or not outcome.content_type.startswith("text/xml"):
        raise Wrong(f"HTTP {outcome.status} {outcome.content_type} from SOAP")
    try:
        root = etree.fromstring(outcome.body, _XML)
    except etree.XMLSyntaxError as exc:
        raise Wrong(f"the answer is not XML: {exc}") from exc
    content = root.findall(f"{SOAP_ENV}Body/*")
    if root.tag != f"{SOAP_ENV}Envelope" or len(content) != 1:
        raise Wrong(f"not a SOAP envelope with one element in its body: {outcome.body[:300]!r}")
    if outcome.status == 200:
        if content[0].tag == f"{SOAP_ENV}Fault" or not content[0].tag.endswith("Response"):
            raise Wrong(f"HTTP 200 with {content[0].tag}")
        if case.refused:
            raise Wrong("a message with a DTD was served")
        return []
    fault = content[0]
    code = fault.findtext("faultcode") or ""
    detail = fault.findall("detail/*")
    if (
        fault.tag != f"{SOAP_ENV}Fault"
        or code.rpartition(":")[2] not in ("Client", "Server")
        or not (fault.findtext("faultstring") or "").strip()
        or len(detail) != 1
    ):
        raise Wrong(
            "not a soap:Fault with a faultcode, a faultstring and a typed detail: "
            f"{outcome.body[:400]!r}"
        )
    kind = etree.QName(detail[0]).localname
    if case.refused and kind != "InvalidRequestFault":
        raise Wrong(f"a message with a DTD answered {kind}, not InvalidRequestFault")
    return [kind]


def http_answer(case, outcome) -> list:
    """The fault types of an answer to a raw request: whatever the binding its path
    names says, and HTTP 500 only with such a fault.  (An answer to HEAD has no body
    to tell.)"""
    if case.method == "HEAD":
        return []
    content_type = outcome.content_type
    faults = []
    try:
        if content_type.startswith("application/json") and outcome.body:
            data = strict_json(outcome)
            answers = data if isinstance(data, list) else [data]
            faults = [
                _rpc_error(a) if "error" in a else _json_fault(outcome.status, a)
                for a in answers
                if isinstance(a, dict) and ("error" in a or "faultInfo" in a)
            ]
        elif content_type.startswith("text/xml") and outcome.status == 500:
            faults = soap_answer(case, outcome)
    except Wrong:
        if outcome.status >= 500:
            raise
    if outcome.status >= 500 and not faults:
        raise Wrong(f"HTTP {outcome.status} that is no fault of a binding: {outcome.body[:300]!r}")
    return faults


ANSWERS = {"json": json_answer, "jsonrpc": jsonrpc_answer, "soap": soap_answer, "http": http_answer}


#: the kinds of problem, as ``judge`` names them
UNANSWERED, RESET, NOT_HTTP, LEAKED, TRACEBACK, INTERNAL_ERROR, WRONG_FORM = (
    "unanswered",
    "reset",
    "not HTTP",
    "leaked socket",
    "traceback",
    "InternalErrorFault",
    "wrong form",
)


def judge(case, outcome):
    """(problems, label): what is wrong with ``outcome``, the answer to ``case``, as
    (kind, description) pairs (none: nothing), and the answer in a few words for
    counting answers of each kind ("400 InvalidValueFault", "200", "closed")."""
    found = []
    if outcome.ending == "hung":
        found.append((UNANSWERED, f"no answer and no close within {ANSWER_WITHIN} s"))
    elif outcome.elapsed > ANSWER_WITHIN:
        found.append((UNANSWERED, f"answered after {outcome.elapsed:.2f} s"))
    if outcome.ending == "closed" and case.binding != "http" and not case.ends_open:
        found.append((UNANSWERED, "closed without an answer"))
    # a body over the limit is refused unread; closing on unread bytes, the server resets
    if outcome.ending == "reset" and len(case.request) <= MAX_REQUEST_BYTES:
        found.append((RESET, "the connection was reset"))
    if outcome.ending == "garbled":
        found.append((NOT_HTTP, f"the answer is no HTTP: {outcome.detail}"))
    if outcome.lingered:
        found.append((LEAKED, "the server kept the connection open after the client had closed it"))
    for mark in TRACEBACK_MARKS:
        if mark in outcome.body and mark not in case.request:
            found.append((TRACEBACK, f"the answer shows a traceback: {outcome.body[:300]!r}"))
    if outcome.ending != "answered":
        return found, outcome.ending
    try:
        faults = ANSWERS[case.binding](case, outcome)
    except Wrong as wrong:
        return found + [(WRONG_FORM, str(wrong))], f"{outcome.status} (wrong)"
    if INTERNAL in faults:
        found.append((INTERNAL_ERROR, f"InternalErrorFault: {outcome.body[:300]!r}"))
    return found, " ".join([str(outcome.status)] + sorted(set(faults)))
