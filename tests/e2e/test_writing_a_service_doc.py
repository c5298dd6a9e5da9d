"""docs/writing-a-service.md, run the way a reader runs it: every ``File: xwords/…`` block
of the page is written out, the package is built and installed like a reader's, and its
own tests run against a real node; what the page quotes of ``xruntime new-service`` is
what the command prints and writes; and no code block of the page imports spyne or
``xruntime.protocol`` (a service imports only ``xruntime.author``).

The package is installed with ``pip install --target`` into a folder of the test's and
put on the PYTHONPATH of its test run (whose node, a subprocess, inherits it and finds
XWords by the entry point of that folder's dist-info), not into the suite's venv, whose
other tests run at the same time and must keep seeing only the shipped services."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

DOC = Path(ROOT) / "docs" / "writing-a-service.md"
#: "File: xwords/…" on a line of its own, then a fenced block (``` or ````) holding it
FILE_BLOCK = re.compile(r"^File: (xwords/\S+)\n(`{3,}|~{3,})[^\n]*\n(.*?)^\2[ \t]*$", re.M | re.S)
#: any fenced block: its fence, then its text
CODE_BLOCK = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)
#: the package's tests: five over the three bindings, one over JSON only
EXPECTED_TESTS = 16


def doc_text():
    return DOC.read_text(encoding="utf-8")


def doc_files():
    """path (under the package's parent folder) → text, for every ``File:`` block."""
    found = {path: text for path, _, text in FILE_BLOCK.findall(doc_text())}
    assert len(found) == len(FILE_BLOCK.findall(doc_text())), "a file is shown twice"
    return found


def run(args, **kwargs):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=600, **kwargs
    )


def clean_env(**extra):
    """The suite's environment without what would add services to the package's nodes
    or change how its pytest runs (the suite's PYTEST_* variables)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYTEST_")}
    env["XRUNTIME_SERVICE_MODULES"] = ""
    return {**env, **extra}


def test_the_page_shows_the_whole_package():
    assert set(doc_files()) == {
        "xwords/pyproject.toml",
        "xwords/README.md",
        "xwords/xwords/types.py",
        "xwords/xwords/__init__.py",
        "xwords/tests/test_xwords.py",
    }


def test_no_code_block_imports_spyne_or_the_protocol():
    blocks = [text for _, text in CODE_BLOCK.findall(doc_text())]
    assert len(blocks) > 20
    python = [text for text in blocks if re.search(r"^\s*(from|import) ", text, re.M)]
    assert python, "no code block imports anything"
    for text in blocks:
        assert not re.search(r"^\s*(from|import)\s+spyne\b", text, re.M), text
        assert "xruntime.protocol" not in text, text
    imported = set(re.findall(r"^\s*from\s+(xruntime[\w.]*)\s+import", "\n".join(blocks), re.M))
    assert imported == {"xruntime.author", "xruntime.testing"}


def test_new_service_prints_and_writes_what_the_page_quotes(tmp_path):
    """The page's output of ``xruntime new-service XWords --dir xwords``, and its
    pyproject.toml is the one the command writes (the reader keeps it as written)."""
    assert "xruntime new-service XWords --dir xwords" in doc_text()
    done = run(["-m", "xruntime", "new-service", "XWords", "--dir", "xwords"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    blocks = [text for _, text in CODE_BLOCK.findall(doc_text())]
    quoted = [text for text in blocks if text.startswith("xwords/pyproject.toml\n")]
    assert quoted == [done.stdout]
    written = (tmp_path / "xwords" / "pyproject.toml").read_text(encoding="utf-8")
    assert doc_files()["xwords/pyproject.toml"] == written
    # the files the page replaces are those the command wrote
    made = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert made == set(doc_files())


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package as the page shows it, built and installed into a folder of its own."""
    root = tmp_path_factory.mktemp("reader")
    for name, text in doc_files().items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    site = root / "site"
    done = run(
        [
            "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
            "--target", str(site), str(root / "xwords"),
        ],
        env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(site.glob("xwords-0.1.0.dist-info/entry_points.txt"))
    return root, site


def test_the_packages_own_tests_pass(installed):
    root, site = installed
    done = run(
        ["-m", "pytest", "-p", "no:cacheprovider", str(root / "xwords")],
        cwd=root / "xwords",
        env=clean_env(PYTHONPATH=str(site)),
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert re.search(rf"\b{EXPECTED_TESTS} passed\b", done.stdout), done.stdout[-3000:]
    assert not re.search(r"\b(failed|error|errors|skipped)\b", done.stdout.splitlines()[-1])
    # and the page says so
    assert f" {EXPECTED_TESTS} passed in " in doc_text()


def test_the_installed_service_is_the_one_a_node_finds(installed):
    """check-config lists XWords from its distribution, with its declared setting."""
    _, site = installed
    done = run(
        ["-m", "xruntime", "check-config", "config/xserver.toml"],
        cwd=ROOT,
        env=clean_env(PYTHONPATH=str(site)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = (
        "service XWords: entry point 'XWords' = 'xwords:service' of group "
        "xruntime.services (distribution xwords 0.1.0)"
    )
    assert line in done.stdout.splitlines()
    assert line in doc_text()
    assert "[services.XWords] max_characters = 1000000  (default)" in done.stdout
