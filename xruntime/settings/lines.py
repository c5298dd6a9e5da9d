"""Line numbers for the errors of the administrator's file.

``tomllib`` gives the values but not where they were written, and an error an
administrator can act on names its line (``line 12: [jobs] fetched_retention: ...``).
So the file's text is scanned once more, plainly, for where each table and key starts.
The scan knows what the shipped file and hand edits use: table headers, dotted keys
(``jobs.max_queued = 1``), quoted keys, one-line inline tables
(``XDemo = { max_queued = 1 }``); it skips the lines inside multi-line strings.  It
never decides validity (tomllib does); at worst an error points at its table's line.
"""

import re
import tomllib

_HEADER = re.compile(r"^\[\s*([^\[\]]+?)\s*\]")
_PART = r'(?:"[^"]*"|[A-Za-z0-9_\-]+)'
_KEY = re.compile(rf"^({_PART}(?:\s*\.\s*{_PART})*)\s*=\s*(.*)$")
_INLINE_KEY = re.compile(r'(?:^|[{,])\s*("?[A-Za-z0-9_\-]+"?)\s*=')


def _dotted(name: str) -> list[str]:
    return [part.strip().strip('"').strip("'") for part in name.split(".")]


def _join(*parts: str) -> str:
    return ".".join(filter(None, parts))


def _tables_start(lines: dict, table: str, number: int) -> None:
    """``[a.b.c]`` (or ``a.b.c = ...``) on line ``number``: tables a, a.b and a.b.c
    start there unless they started before."""
    parts = table.split(".")
    for depth in range(1, len(parts) + 1):
        lines.setdefault((".".join(parts[:depth]), None), number)


def scan(text: str) -> dict[tuple[str, str | None], int]:
    """(table, key) → line number of its first mention; (table, None) → the line the
    table starts on (its header, or the first key written into it)."""
    lines: dict[tuple[str, str | None], int] = {}
    table, in_string = "", None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if in_string:
            if in_string in stripped:
                in_string = None
            continue
        header = _HEADER.match(stripped)
        if header:
            table = ".".join(_dotted(header.group(1)))
            _tables_start(lines, table, number)
            continue
        key = _KEY.match(stripped)
        if not key:
            continue
        parts = _dotted(key.group(1))
        lines.setdefault((_join(table, *parts[:-1]), parts[-1]), number)
        _tables_start(lines, _join(table, *parts), number)
        value = key.group(2)
        for quote in ('"""', "'''"):
            if value.startswith(quote) and value.count(quote) == 1:
                in_string = quote
        if value.startswith("{"):
            for name in _INLINE_KEY.findall(value):
                lines.setdefault((_join(table, *parts), name.strip('"')), number)
    return lines


class KeyLines:
    """Where the tables and keys of one file's text are."""

    def __init__(self, text: str) -> None:
        self._lines = scan(text)

    def of(self, table: str, key: str | None = None) -> int:
        """The line of ``key`` in ``table`` (of the table itself when None), else of
        the table, else 1."""
        found = self._lines.get((table, key)) or self._lines.get((table, None))
        if not found and "." in table:  # a table written as an inline value
            parent, _, name = table.rpartition(".")
            found = self._lines.get((parent, name))
        return found or 1


def toml_error(exc: tomllib.TOMLDecodeError) -> str:
    """tomllib's complaint as ``line N: not valid TOML: ...``."""
    found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
    where = f"line {found.group(1)}" if found else "line ?"
    return f"{where}: not valid TOML: {re.sub(r' [(]at line.*', '', str(exc))}"
