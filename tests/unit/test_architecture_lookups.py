"""docs/architecture.md's "Where to look first" stays true: every file a row names
exists, and every name it says to start at is defined in that row's files.  A module
moved or a method renamed fails here, not in a reader's search."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "xruntime"
SECTION = "## Where to look first"


def rows() -> list[tuple[str, list[str], list[str]]]:
    """(question, files, names) of each row of the section's table."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`"):
            continue
        quoted = re.findall(r"`([^`]+)`", cells[1] + " " + cells[2])
        files = [q for q in quoted if q.endswith(".py")]
        names = [q for q in quoted if re.fullmatch(r"[A-Za-z_][\w.]*", q) and not q.endswith(".py")]
        found.append((cells[0], files, names))
    return found


def defined(path: Path) -> set[str]:
    """The classes, functions and methods of ``path`` (``Class.method`` and ``method``)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.update({item.name, f"{node.name}.{item.name}"})
    return names


def test_the_table_has_the_five_lookups_the_house_promises():
    questions = " ".join(question for question, _, _ in rows())
    for asked in ("waits", "lease is renewed", "SOAP fault", "callback is signed", "large result"):
        assert asked in questions


def test_every_file_and_name_of_the_table_exists():
    wrong = []
    for question, files, names in rows():
        assert files, f"the row {question!r} names no file"
        known = set()
        for file in files:
            path = PACKAGE / file
            if not path.is_file():
                wrong.append(f"{question}: no file xruntime/{file}")
                continue
            known |= defined(path)
        wrong += [
            f"{question}: {name} is in none of {files}" for name in names if name not in known
        ]
    assert not wrong, "\n".join(wrong)


def test_every_module_is_named_in_the_architecture():
    """A module no page names is one a reader cannot find from the docs (Alembic's
    migrations and ``python -m xruntime`` aside: they are found by their place)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if path.name in ("__init__.py", "__main__.py") or "migrations/" in relative:
            continue
        if relative not in text and f"`{path.name}`" not in text:
            unnamed.append(relative)
    assert not unnamed, f"modules docs/architecture.md never names: {unnamed}"
