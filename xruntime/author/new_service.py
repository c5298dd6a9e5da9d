"""``xruntime new-service XName --dir PATH``: a complete, installable service package to
start from: a pyproject declaring the service's entry point, a long operation with
progress, stop and a typed fault, its tests on ``xruntime.testing`` and a README.
``pip install -e PATH`` into the environment that holds xruntime, and the next node
serves it; ``python -m pytest PATH`` runs its tests against a real node."""

import keyword
import re
from pathlib import Path

#: A service's name: a letter, then letters and digits (it names URLs, WSDLs and types).
SERVICE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")


class NewServiceError(Exception):
    """Why the package cannot be written (one line)."""


def package_name(service: str) -> str:
    """The Python package (and distribution) of a service: its name in lower case."""
    return service.lower()


def write(service: str, folder: Path) -> list[Path]:
    """Write the package of ``service`` into ``folder`` (new, or empty); answers the files."""
    if not SERVICE_NAME.match(service):
        raise NewServiceError(
            f"{service!r} is no service name: a capital letter, then letters and digits "
            "(e.g. XWords)"
        )
    package = package_name(service)
    if keyword.iskeyword(package) or package in ("xruntime", "xruntime_services", "tests"):
        raise NewServiceError(f"{service!r} would make the package {package!r}: choose another")
    if folder.exists() and any(folder.iterdir()):
        raise NewServiceError(f"{folder} is not empty: give a new folder")
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{package}/__init__.py": SERVICE,
        f"{package}/types.py": TYPES,
        f"tests/test_{package}.py": TESTS,
    }
    written = []
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("XNAME", service).replace("xname", package), encoding="utf-8")
        written.append(path)
    return written


PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "xname"
version = "0.1.0"
description = "XNAME: long operations as jobs, served by xruntime"
readme = "README.md"
requires-python = ">=3.11"
# met by the xruntime installed beside it
dependencies = ["xruntime"]

[project.optional-dependencies]
# xruntime.testing's clients (requests; zeep for SOAP)
test = ["xruntime[testing]"]

# how xruntime finds the service: the entry point's name is the service's name
[project.entry-points."xruntime.services"]
XNAME = "xname:service"

[tool.setuptools]
packages = ["xname"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

README = """\
# XNAME

A service for [xruntime](https://pypi.org/project/xruntime/): its long operation
`process` becomes `startProcess`, `fetchProcessResponse` and the synchronous `process`
over JSON (`/services/rs/XNAME/...`), JSON-RPC (`/services/rpc/XNAME`) and SOAP
(`/services/ws/XNAME?wsdl`), with `watchJob`, `stopJob` and `deleteJob` from XRuntime.

Install it into the environment that holds xruntime, and every node started there
serves it (xruntime finds it by its entry point in the group `xruntime.services`):

```sh
pip install -e .
xruntime check-config config/xserver.toml   # lists XNAME and where it came from
xruntime serve
```

Its tests start a real node with the service and drive it through every binding
(`xruntime.testing`):

```sh
python -m pytest
```

The operation is in `xname/__init__.py`, its types in `xname/types.py`; replace the
example's work with yours (xruntime's docs/writing-a-service.md).
"""

TYPES = '''\
"""XNAME's request, response and fault types.

They take the service's namespace (http://xruntime.org/xserver/xname) on their own;
bounds on a field (``Long(ge=1, le=...)``, ``Unicode(max_len=...)``) are checked before
a job is started, and a value out of them is an ``InvalidValueFault`` naming the field.
"""

from xruntime.author import (
    Long,
    ProcessingFault,
    RequestBase,
    ResponseBase,
    Unicode,
    XModel,
    repeated,
)


class ProcessRequest(RequestBase):
    texts = repeated(Unicode(max_len=10_000))  # at least one
    msPerText = Long(ge=0, le=60_000)  # how long each text takes (default 0)


class ProcessedText(XModel):
    text = Unicode  # the text, upper-cased
    length = Long  # its length in characters


class ProcessResponse(ResponseBase):
    results = repeated(ProcessedText)  # one per text processed, in order


class UnprocessableTextFault(ProcessingFault):
    """A text the service cannot process (here: one that starts with "!")."""

    index = Long  # its position in texts, from 0
'''

SERVICE = '''\
"""XNAME: processes texts, one after the other, as a long operation.

``process(ProcessRequest) -> ProcessResponse``: xruntime makes ``startProcess``,
``fetchProcessResponse`` and the synchronous ``process`` of it, in every binding.  The
function runs in a worker process; ``job`` tells it of a stop and takes its progress.
"""

from xruntime.author import (
    BulkProgress,
    InvalidValueFault,
    JobContext,
    MissingParameterFault,
    Service,
)

from .types import ProcessedText, ProcessRequest, ProcessResponse, UnprocessableTextFault

service = Service("XNAME", "Processes texts (a service made with xruntime new-service).")

MAX_TEXTS = service.setting("max_texts", int, 1000, "texts one request may hold", minimum=1)


def check(request: ProcessRequest, settings: dict) -> None:
    """Refuse a bad request at the start, before it becomes a job."""
    if not request.texts:
        raise MissingParameterFault("texts is required: at least one text", parameter="texts")
    if len(request.texts) > settings["max_texts"]:
        raise InvalidValueFault(
            f"at most {settings['max_texts']} texts, not {len(request.texts)}",
            parameter="texts",
            hint="Split the texts over several requests.",
        )


@service.long_operation(
    request=ProcessRequest,
    response=ProcessResponse,
    faults=(UnprocessableTextFault,),
    validate=check,
)
def process(request: ProcessRequest, job: JobContext) -> ProcessResponse:
    results: list[ProcessedText] = []
    for index, text in enumerate(request.texts):
        if job.wait((request.msPerText or 0) / 1000):  # True once stopped: wind down
            break
        if text.startswith("!"):
            raise UnprocessableTextFault(
                f"text {index} starts with '!'", index=index, hint="Leave out that text."
            )
        results.append(ProcessedText(text=text.upper(), length=len(text)))
        job.report_progress(
            BulkProgress(remaining=len(request.texts) - len(results), successful=len(results))
        )
    if job.stop_requested and not results:
        raise job.stop_fault()  # stopped before anything was done
    return ProcessResponse(results=results)  # all, or what was done before a stop
'''

TESTS = '''\
"""XNAME through a real node and every binding (xruntime.testing's fixtures:
``xruntime_client`` runs each test over JSON, JSON-RPC and SOAP)."""

import pytest

from xruntime.testing import Fault, run_job, wait_done


def test_processes_every_text(xruntime_client):
    job, response = run_job(xruntime_client, "XNAME", "process", {"texts": ["ab", "cde"]})
    assert job["status"] == "SUCCEEDED"
    assert job["progress"]["successful"] == 2
    assert [r["text"] for r in response["results"]] == ["AB", "CDE"]
    assert [r["length"] for r in response["results"]] == [2, 3]


def test_a_stopped_job_hands_back_what_it_did(xruntime_client):
    job = xruntime_client.call(
        "XNAME", "startProcess", {"texts": ["a"] * 100, "msPerText": 100}
    )
    watched = xruntime_client.call("XRuntime", "watchJob", {"id": job["id"]})
    while watched.get("progress", {}).get("successful", 0) < 1:
        watched = xruntime_client.call(
            "XRuntime", "watchJob", {"id": job["id"], "progressUpdatePeriod": 100}
        )
    xruntime_client.call("XRuntime", "stopJob", {"id": job["id"]})
    assert wait_done(xruntime_client, job["id"])["status"] == "SUCCEEDED"
    response = xruntime_client.call("XNAME", "fetchProcessResponse", {"id": job["id"]})
    assert 1 <= len(response["results"]) < 100
    assert response["resultLimitations"][0]["reason"] == "REQUEST_STOPPED"


def test_an_unprocessable_text_fails_the_job_with_its_fault(xruntime_client):
    with pytest.raises(Fault) as raised:
        run_job(xruntime_client, "XNAME", "process", {"texts": ["fine", "!bad"]})
    assert raised.value.type == "UnprocessableTextFault"
    assert raised.value.fields["index"] == 1


def test_a_request_without_texts_is_refused_at_the_start(xruntime_client):
    with pytest.raises(Fault) as raised:
        xruntime_client.call("XNAME", "startProcess", {})
    assert raised.value.type == "MissingParameterFault"
'''
