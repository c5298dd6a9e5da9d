"""The layers of docs/architecture.md, checked: which part of xruntime may import which,
and no circle between modules.  Every import counts, at module level or inside a
function (a function-level import hides a circle; it does not remove it), and those under
``if TYPE_CHECKING:`` too: they never run, but a type-only import still ties the two
modules together for a reader, who must know the one to read the other.

``python -m tests.unit.test_layers`` prints the count: modules, import edges and
circles, for the imports that run and for all of them."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "xruntime"

#: Lowest first.  A part may import its own layer's modules only from itself, and any
#: part of a lower layer.
LAYERS = [
    {"support", "settings"},  # the log, metrics, blocking pool; the administrator's file
    {"protocol"},  # the contract: types, faults, states, codec (no I/O)
    # the stored form of a payload: bytes ⇄ JSON text, joins, streams (no SQL, no I/O)
    {"payload"},
    {"store"},  # the job store: the only part that speaks SQL
    {"author"},  # the service author's API and the registry of services
    # workers and their supervision, the notifier; callbacks: checked, signed, sent
    {"engine", "callbacks"},
    {"operations"},  # the job protocol's operations (uses the engine's notifier)
    {"bindings"},  # SOAP, JSON, JSON-RPC
    {"web"},  # the ASGI application and its guards
    {"admin"},  # the status page, /metrics
    {"serving"},  # a node's processes and live reload
    {"cli"},  # the command
    {"__main__"},  # python -m xruntime
]
#: Parts outside the stack, with what they may import.
OUTSIDE = {
    # the client speaks HTTP: nothing of the server
    "client": {"support", "protocol", "client"},
    # the kit for service authors' tests starts a node as a command and talks HTTP to it
    "testing": {"support", "testing"},
}
#: Who may import a part outside the stack.
USED_BY = {"client": {"cli"}, "testing": set()}
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def modules():
    """Every module of the package: its dotted name → its file."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = modules()


def imported(name: str, path: Path, run_time_only: bool = False) -> set:
    """The xruntime modules ``name`` imports (a package's ``__init__`` for a name taken
    from a package; the module itself for a submodule taken with ``from P import m``);
    ``run_time_only``: not those under ``if TYPE_CHECKING:``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in _run_time_nodes(tree) if run_time_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets.add(source)
            targets.update(
                f"{source}.{alias.name}"
                for alias in node.names
                if f"{source}.{alias.name}" in MODULES
            )
    return {t for t in targets if t in MODULES and t != name}


def _run_time_nodes(tree):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for the type
    checker alone, which never run): for the count of the imports that run."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING":
                pending.extend(child.orelse)
                continue
            pending.append(child)


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "xruntime"


def allowed(source: str, target: str) -> bool:
    if target == "xruntime" or source == target:  # the root package: __version__ and the spyne shim
        return True
    if source in OUTSIDE:
        return target in OUTSIDE[source]
    if source == "xruntime":
        return target == "support"
    if target in OUTSIDE:
        return source in USED_BY[target]
    return LEVEL[target] < LEVEL[source]


def test_every_part_has_a_place():
    parts = {part_of(m) for m in MODULES} - {"xruntime"}
    assert parts <= set(LEVEL) | set(OUTSIDE), (
        f"parts with no layer: {parts - set(LEVEL) - set(OUTSIDE)}"
    )


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_only(name):
    wrong = sorted(
        t for t in imported(name, MODULES[name]) if not allowed(part_of(name), part_of(t))
    )
    assert not wrong, (
        f"{name} ({part_of(name)}) imports {wrong}: see the layers in docs/architecture.md"
    )


def import_graph(run_time_only: bool = False) -> dict[str, set]:
    """Module → the modules it imports (``imported``), but for a package's ``__init__``
    re-exporting its own modules, which is no circle with them."""
    return {
        name: {
            t
            for t in imported(name, path, run_time_only)
            if not (name.startswith(t + ".") and MODULES[t].name == "__init__.py")
        }
        for name, path in MODULES.items()
    }


def circles(graph: dict[str, set]) -> list[list]:
    """The import circles of ``graph``, each as the trail that closes it (a → b → a)."""
    found, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                found.append(trail[trail.index(target) :] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return found


def test_no_circles_between_modules():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" → ".join(c) for c in found)


def test_loggers_are_named_after_their_module():
    """A logger named by hand drifts from its module when the module moves; one named
    ``__name__`` (or ``__package__``, one logger for a package) cannot."""
    by_hand = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith("xruntime")
            ):
                by_hand.append(f"{name}:{node.lineno} getLogger({node.args[0].value!r})")
    assert by_hand == []


# --------------------------------------------------------------------------- services

SERVICES = PACKAGE.parent / "services"
#: What a shipped service may import of the framework: the author's API alone (it
#: re-exports the types, field types and faults), never spyne, the protocol's internals
#: or the store (docs/writing-a-service.md).
SERVICE_MAY_IMPORT = {"xruntime.author"}


def service_imports():
    """(file, line, imported module) of every import in ``services/`` that names
    ``xruntime`` or spyne, run-time or not."""
    found = []
    for path in sorted(SERVICES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("xruntime", "spyne"):
                    found.append((path.relative_to(SERVICES.parent), node.lineno, name))
    return found


def test_shipped_services_import_only_the_authors_api():
    imports = service_imports()
    assert any(name == "xruntime.author" for _, _, name in imports)  # the scan sees them
    wrong = [
        f"{p}:{line} imports {name}" for p, line, name in imports if name not in SERVICE_MAY_IMPORT
    ]
    assert wrong == [], "a service imports more than xruntime.author:\n" + "\n".join(wrong)


def test_the_framework_does_not_import_the_shipped_services():
    """The framework finds the services through their entry points, by name only."""
    wrong = [
        name
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(
            n.split(".")[0] == "xruntime_services"
            for n in (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
        )
    ]
    assert wrong == []


def code_lines(path: Path) -> int:
    """The lines of ``path`` that hold code: not blank, not only a comment, not in a
    docstring (of the module, a class or a function)."""
    import io
    import tokenize

    source = path.read_text(encoding="utf-8")
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            docstrings.update(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT}
    skipped |= {tokenize.DEDENT, tokenize.ENDMARKER}
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def main() -> None:
    """Print the house's count: modules and their lines (all, and code alone), and the
    import edges and circles, for the imports that run and for all of them (type-only
    ones too, as the tests count them)."""
    paths = list(MODULES.values())
    total = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in paths)
    code = sum(code_lines(path) for path in paths)
    print(f"product code: {len(paths)} modules, {total} lines, {code} of them code")
    for title, run_time_only in (("imports that run", True), ("all imports", False)):
        graph = import_graph(run_time_only)
        found = circles(graph)
        edges = sum(len(targets) for targets in graph.values())
        print(f"{title}: {len(graph)} modules, {edges} import edges, {len(found)} circles")
        for circle in found:
            print("  " + " → ".join(circle))


if __name__ == "__main__":
    main()
