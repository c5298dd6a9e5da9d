"""Services from outside the repository, as their authors ship them: packages written by
``xruntime new-service``, built and installed as distributions of their own, found by
their entry points (docs/writing-a-service.md).

Each package is installed with ``pip install --target`` into a folder of the test's and
put on the PYTHONPATH of the commands and nodes it starts, rather than into the suite's
venv, whose other tests (running at the same time) must keep seeing only the shipped
services."""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import zeep
from openapi_spec_validator import validate

from xruntime.testing import BINDINGS, Fault, Node, run_job


def run(*args, env=None, timeout=120, cwd=None):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )


def new_service(name, folder):
    done = run("-m", "xruntime", "new-service", name, "--dir", str(folder))
    assert done.returncode == 0, done.stderr
    return folder


def install(packages, site):
    """Build and install the packages (folders) as distributions into ``site``."""
    done = run(
        "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
        "--target", str(site), *map(str, packages),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {**os.environ, "PYTHONPATH": str(site), "XRUNTIME_SERVICE_MODULES": ""}


@pytest.fixture(scope="module")
def two_services(tmp_path_factory):
    """XWords and XLetters, two distributions: each defines the nested type
    ``ProcessedText`` (and ``ProcessRequest``…) under the same class names."""
    root = tmp_path_factory.mktemp("outside")
    packages = [new_service("XWords", root / "xwords"), new_service("XLetters", root / "xletters")]
    return root, packages, install(packages, root / "site")


@pytest.fixture(scope="module")
def node(two_services, tmp_path_factory):
    _, _, env = two_services
    with Node(tmp_path_factory.mktemp("node"), env=env) as running:
        yield running


def test_check_config_lists_the_outside_services_and_their_distributions(two_services):
    _, _, env = two_services
    done = run("-m", "xruntime", "check-config", "config/xserver.toml", env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(
        line.startswith("service XWords: entry point 'XWords' = 'xwords:service'")
        and "(distribution xwords 0.1.0)" in line
        for line in lines
    ), done.stdout
    assert any(line.startswith("service XLetters: ") for line in lines)
    assert "[services.XWords] max_texts = 1000  (default)" in lines


def test_wsdl_out_writes_their_wsdls_and_schemas(two_services, tmp_path):
    _, _, env = two_services
    done = run("-m", "xruntime", "wsdl", "--out", str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr
    for name in ("XWords", "XLetters"):
        assert (tmp_path / f"{name}.wsdl").exists()
        schema = (tmp_path / "schemas" / f"{name}.xsd").read_text()
        namespace = f"http://xruntime.org/xserver/{name.lower()}"
        assert f'targetNamespace="{namespace}"' in schema
        assert 'name="ProcessedText"' in schema  # the nested type, in its service's schema
    assert "ProcessedText" not in (tmp_path / "schemas" / "types.xsd").read_text()
    # the shipped services are there too, and unchanged
    assert (tmp_path / "XDemo.wsdl").read_bytes() == (Path(ROOT) / "wsdl/XDemo.wsdl").read_bytes()


def test_the_openapi_document_has_their_operations_apart(two_services, node, tmp_path):
    """Served, each service's operations have their paths; ``process`` of both is told
    apart by its service in its ``operationId``, and each one's ``ProcessedText`` is a
    component of its own. It validates, and it is what ``xruntime wsdl --out`` writes."""
    _, _, env = two_services
    with urllib.request.urlopen(f"{node.url}/services/rs/openapi.json", timeout=10) as r:
        served = r.read()
    document = json.loads(served)
    validate(document)
    ids = {path: item["post"]["operationId"] for path, item in document["paths"].items()}
    for name in ("XWords", "XLetters"):
        assert ids[f"/services/rs/{name}/process"] == f"{name}_process"
        assert document["paths"][f"/services/rs/{name}/startProcess"]["post"]["tags"] == [name]
    assert ids["/services/rs/XDemo/startSimulate"] == "startSimulate"  # unique: no prefix
    assert len(set(ids.values())) == len(ids)
    nested = [n for n in document["components"]["schemas"] if n.endswith("ProcessedText")]
    assert len(nested) == 2, nested
    done = run("-m", "xruntime", "wsdl", "--out", str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "openapi.json").read_bytes() == served
    # a generator makes a client of it without a warning (tests/e2e/test_openapi_client.py)
    (tmp_path / "generator.yaml").write_text("post_hooks: []\n")
    done = run(
        "-m", "openapi_python_client", "generate", "--path", str(tmp_path / "openapi.json"),
        "--meta", "none", "--config", str(tmp_path / "generator.yaml"),
        "--output-path", str(tmp_path / "client"), "--fail-on-warning",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0 and "warning" not in done.stdout.lower(), done.stdout + done.stderr
    assert (tmp_path / "client" / "models" / "x_words_processed_text.py").exists()


@pytest.mark.parametrize("binding", BINDINGS)
def test_both_are_served_through_every_binding(node, binding):
    client = node.client(binding)
    for service, texts in (("XWords", ["ab", "c"]), ("XLetters", ["xyz"])):
        job, response = run_job(client, service, "process", {"texts": texts})
        assert job["status"] == "SUCCEEDED"
        assert [r["text"] for r in response["results"]] == [t.upper() for t in texts]
    with pytest.raises(Fault) as raised:
        run_job(client, "XWords", "process", {"texts": ["!no"]})
    assert raised.value.type == "UnprocessableTextFault" and raised.value.fields["index"] == 0


def test_zeep_reads_both_wsdls_each_type_in_its_own_namespace(node):
    for name in ("XWords", "XLetters"):
        client = zeep.Client(f"{node.url}/services/ws/{name}?wsdl")
        nested = client.get_type(f"{{http://xruntime.org/xserver/{name.lower()}}}ProcessedText")
        assert [element for element, _ in nested.elements] == ["text", "length"]
        answer = client.service.process(texts=["hi"])
        assert answer.results[0].text == "HI"


def test_their_own_tests_pass_with_xruntime_testing(two_services):
    _, packages, env = two_services
    done = run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", env=env, cwd=packages[0], timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "12 passed" in done.stdout


# --------------------------------------------------------------------------- what is refused


def serve(env, folder, timeout=60):
    """``xruntime serve`` on a fresh config; answers (exit status, output, seconds)."""
    node = Node(folder, env=env)
    began = time.monotonic()
    done = run(
        "-m", "xruntime", "serve", "--config", str(node.config_path), env=env, timeout=timeout
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - began


def test_two_services_of_one_name_stop_the_node_with_one_line(two_services, tmp_path):
    root, packages, _ = two_services
    # a second distribution (xwords2) that also names its service XWords
    twin = tmp_path / "xwords2"
    shutil.copytree(packages[0], twin)
    (twin / "xwords").rename(twin / "xwords2")
    pyproject = twin / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text()
        .replace('name = "xwords"', 'name = "xwords2"')
        .replace('"xwords:service"', '"xwords2:service"')
        .replace('packages = ["xwords"]', 'packages = ["xwords2"]')
    )
    env = install([packages[0], twin], tmp_path / "site")
    code, output, seconds = serve(env, tmp_path / "node")
    assert code == 2 and seconds < 30
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("xruntime: two services named 'XWords': ")
    assert "distribution xwords 0.1.0" in lines[0] and "distribution xwords2 0.1.0" in lines[0]
    assert "starting another" not in output


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "xmissing:service",
            "cannot import xmissing: ModuleNotFoundError: No module named 'xmissing'",
        ),
        (
            "xwords.types:service",
            "module xwords.types has no 'service' (a Service made with xruntime.author.Service)",
        ),
        ("xwords:check", "xwords.check is a function, not an xruntime.author.Service"),
    ],
)
def test_a_broken_entry_point_is_one_line_naming_it_and_its_distribution(
    two_services, tmp_path, value, expected
):
    _, packages, _ = two_services
    broken = tmp_path / "xbroken"
    new_service("XBroken", broken)
    pyproject = broken / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"xbroken:service"', f'"{value}"'))
    env = install([packages[0], broken], tmp_path / "site")
    for command in (
        ["check-config", "config/xserver.toml"],
        ["wsdl", "--out", str(tmp_path / "w")],
    ):
        done = run("-m", "xruntime", *command, env=env, cwd=ROOT)
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr == (
            f"xruntime: entry point 'XBroken' = '{value}' of group xruntime.services "
            f"(distribution xbroken 0.1.0): {expected}\n"
        )
    code, output, _ = serve(env, tmp_path / "node")
    assert code == 2 and output.strip().count("\n") == 0 and expected in output


ROOT = str(Path(__file__).resolve().parents[2])
