"""The documentation's tables of configuration keys, generated from ``schema``.

The README and docs/protocol.md each list every key with its default.  Lists written
by hand drift from the code, so they are generated: each document holds its table
between two marker comments, a test regenerates it and fails when the document differs,
and

    python -m xruntime.settings.docs --write      # in the repository's root

rewrites them.  ``--markdown`` prints the README's table.  The settings a service declares
for its own ``[services.NAME]`` table (``Service.setting``) are rows of the same table; this
layer knows no service, so the callers hand them over (``service_keys``, the registry's
``setting_keys()``), and the command finds the registry by name, as the registry finds
the services.
"""

import argparse
import importlib
import json
import os
import re
import sys
from collections.abc import Sequence

from . import model
from .schema import TABLES, FileTable, Key, ServiceKeys, keys_of, refusals_of

#: document (relative to the repository's root) → whether its table cites the sections
#: of docs/protocol.md
DOCUMENTS = {"README.md": False, os.path.join("docs", "protocol.md"): True}

#: where the command finds the services' keys (``setting_keys()``): a layer above this
#: one, so found by name when the command runs, never imported by this module
REGISTRY = "xruntime.author.registry"

#: this module's importable name, also when run with ``python -m`` (as ``__main__``)
_MODULE = __spec__.name if __spec__ is not None else __name__
_BEGIN = re.compile(r"<!-- config-table:begin[^>]*-->")
_END = "<!-- config-table:end -->"


def command() -> str:
    """The command that rewrites the documents' tables."""
    return f"python -m {_MODULE} --write"


def _toml(value: object) -> str:
    """A default as written in the file."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return str(value)


def _size(value: object) -> str:
    """`` (16 MiB)`` after a byte count that is a round number of KiB, MiB or GiB."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
        return ""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value % size == 0:
            return f" ({value // size} {unit})"
    return ""


def _default(key: Key) -> str:
    if key.default_doc:
        return key.default_doc
    shown = f"`{_toml(key.default)}`"
    return shown + (_size(key.default) if key.name.endswith("_bytes") else "")


def _applied(keys: Sequence[Key]) -> str:
    return "live" if all(key.live for key in keys) else "restart"


def _meaning(doc: str, section: str, cite: bool) -> str:
    return f"{doc} ({section})" if cite and section else doc


def _row(path: str, key: Key, cite: bool) -> str:
    return (
        f"| `[{path}] {key.name}` | {key.kind.name} | {_default(key)} "
        f"| {_applied([key])} | {_meaning(key.doc, key.section, cite)} |"
    )


def _override_row(declared: FileTable, home: str, keys: list[Key], cite: bool) -> str:
    """One row for the keys ``declared`` takes from their ``home`` table."""
    refused = refusals_of(declared.path)
    everything = [
        key for key in keys_of(home).values() if key.home == home and key.name not in refused
    ]
    if keys == everything:
        named = f"`[{declared.path}] <any [{home}] key>`"
    else:
        named = f"`[{declared.path}] {keys[0].name}`" + "".join(
            f", `{key.name}`" for key in keys[1:]
        )
    doc = declared.override_doc
    if refused:
        doc += " (not " + ", ".join(f"`{name}`" for name in refused) + ")"
    sections = sorted(
        {key.section for key in keys if key.section}, key=lambda section: int(section[1:])
    )
    return (
        f"| {named} | as in `[{home}]` | {declared.override_default} | {_applied(keys)} "
        f"| {_meaning(doc, ', '.join(sections), cite)} |"
    )


def markdown_table(cite_sections: bool = False, service_keys: ServiceKeys | None = None) -> str:
    """Every table and key: name, kind of value, default, whether a live reload applies
    it, and its meaning (with docs/protocol.md's section when ``cite_sections``); after
    ``[services.NAME]``'s own, the keys each service declares (``service_keys``)."""
    rows = ["| key | value | default | applied | meaning |", "|---|---|---|---|---|"]
    for declared in TABLES:
        held = keys_of(declared.path).values()
        rows += [
            _row(declared.path, key, cite_sections) for key in held if key.home == declared.path
        ]
        if declared.path == "services.NAME":
            rows += [
                _row(f"services.{service}", key, cite_sections)
                for service, keys in sorted((service_keys or {}).items())
                for key in keys
            ]
        homes = dict.fromkeys(key.home for key in held if key.home != declared.path)
        rows += [
            _override_row(declared, home, [key for key in held if key.home == home], cite_sections)
            for home in homes
        ]
    return "\n".join(rows)


def block(cite_sections: bool = False, service_keys: ServiceKeys | None = None) -> str:
    """The table with its marker comments, as a document holds it."""
    declared = model.__name__.replace(".", "/") + ".py"
    begin = (
        f"<!-- config-table:begin: generated from the schema by `{command()}`; "
        f"edit {declared}, not this table -->"
    )
    return f"{begin}\n{markdown_table(cite_sections, service_keys)}\n{_END}"


def current_block(text: str) -> str | None:
    """The marked table a document's text holds (None: no markers)."""
    begin = _BEGIN.search(text)
    end = text.find(_END, begin.end()) if begin else -1
    return text[begin.start() : end + len(_END)] if begin and end >= 0 else None


def rewrite(text: str, cite_sections: bool, service_keys: ServiceKeys | None = None) -> str:
    """``text`` with its marked table replaced by the generated one."""
    old = current_block(text)
    if old is None:
        raise ValueError("no <!-- config-table:begin --> … <!-- config-table:end --> markers")
    return text.replace(old, block(cite_sections, service_keys), 1)


def write(root: str, service_keys: ServiceKeys | None = None) -> list[str]:
    """Rewrite the tables of DOCUMENTS under ``root``; the documents that changed."""
    changed = []
    for name, cite in DOCUMENTS.items():
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = rewrite(text, cite, service_keys)
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            changed.append(name)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """``--markdown``: print the README's table; ``--write``: rewrite the documents."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {_MODULE}", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--markdown", action="store_true", help="print the README's table")
    parser.add_argument("--protocol", action="store_true", help="print docs/protocol.md's table")
    parser.add_argument(
        "--write", action="store_true", help="rewrite the tables of " + ", ".join(DOCUMENTS)
    )
    parser.add_argument("--root", default=".", help="the repository's root (default: here)")
    args = parser.parse_args(argv)
    service_keys = importlib.import_module(REGISTRY).setting_keys()
    if args.write:
        for name in write(args.root, service_keys):
            print(f"rewrote {name}")
    elif args.protocol:
        print(markdown_table(True, service_keys))
    else:
        print(markdown_table(False, service_keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
