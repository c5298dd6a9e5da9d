"""The decoders of docs/xdima-encoded.md (Python, Java, C#), taken from the page as they
are, decode a real node's encoded matrix to exactly the plain form's numbers.

Java runs as a single-file source program (JDK 11+); C# needs Mono's ``mcs`` and
``mono`` (Debian's mono-devel): skipped without them, unless
XRUNTIME_TEST_REQUIRE_SOAP_GENERATORS=1 (CI), where their absence fails."""

import os
import random
import re
import subprocess
import sys

import pytest

from tests.harness import ROOT, Server
from tests.tools import require

STARTS, DESTINATIONS = 45, 37


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("decoders"))).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def answers(server):
    """(plain answer, encoded answer) of one matrix, fetched over JSON."""
    rng = random.Random(11)
    request = {
        "startLocations": [
            {"longitude": rng.uniform(-180, 180), "latitude": rng.uniform(-90, 90)}
            for _ in range(STARTS)
        ],
        "destinationLocations": [
            {"longitude": rng.uniform(-180, 180), "latitude": rng.uniform(-90, 90)}
            for _ in range(DESTINATIONS)
        ],
        "profile": {"averageSpeedKmh": 0.45, "detourFactor": 9},  # travel times past 2³⁰
    }
    plain = server.call("XDima", "createDistanceMatrix", request)
    encoded = server.call(
        "XDima", "createDistanceMatrix", dict(request, contentsFormat="ENCODED_ARRAYS")
    )
    return plain, encoded


def example(language):
    with open(os.path.join(ROOT, "docs", "xdima-encoded.md"), encoding="utf-8") as f:
        blocks = re.findall(rf"```{language}\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1, f"{len(blocks)} {language} blocks in docs/xdima-encoded.md"
    return blocks[0]


def expected(plain, name):
    values = [row[name] for row in plain["rows"]]
    return (
        f"rows {len(values)} columns {len(values[0])} first {values[0][0]} "
        f"last {values[-1][-1]} sum {sum(map(sum, values))}"
    )


def run(command, cwd):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}{done.stderr}"
    return done.stdout.strip()


def decoded_by(language, folder, text):
    (folder / "matrix.b64").write_text(text)
    if language == "python":
        (folder / "decode.py").write_text(example("python"))
        return run([sys.executable, "decode.py", "matrix.b64", str(DESTINATIONS)], folder)
    if language == "java":
        require("java", install="a JDK")
        (folder / "DecodeMatrix.java").write_text(example("java"))
        return run(["java", "DecodeMatrix.java", "matrix.b64", str(DESTINATIONS)], folder)
    require("mcs", "mono", install="apt-get install mono-devel")
    (folder / "DecodeMatrix.cs").write_text(example("csharp"))
    run(["mcs", "-out:decode.exe", "DecodeMatrix.cs"], folder)
    return run(["mono", "decode.exe", "matrix.b64", str(DESTINATIONS)], folder)


@pytest.mark.parametrize("language", ["python", "java", "csharp"])
@pytest.mark.parametrize("name", ["distances", "travelTimes"])
def test_the_docs_decoder_reads_the_plain_forms_numbers(answers, tmp_path, language, name):
    plain, encoded = answers
    assert max(max(row["travelTimes"]) for row in plain["rows"]) > 2**30  # high bytes used
    output = decoded_by(language, tmp_path, encoded["encodedContents"][name])
    assert output == expected(plain, name)


def test_the_worked_example_of_the_docs(server):
    """The page's example, byte for byte."""
    answer = server.call(
        "XDima",
        "createDistanceMatrix",
        {
            "startLocations": [{"longitude": 0, "latitude": 0}],
            "destinationLocations": [
                {"longitude": 0, "latitude": 0},
                {"longitude": 0, "latitude": 1},
            ],
            "profile": {"averageSpeedKmh": 36, "detourFactor": 1},
            "contentsFormat": "ENCODED_ARRAYS",
        },
    )
    with open(os.path.join(ROOT, "docs", "xdima-encoded.md"), encoding="utf-8") as f:
        page = f.read()
    for name in ("distances", "travelTimes"):
        assert f'`"{answer["encodedContents"][name]}"`' in page
