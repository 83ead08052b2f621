"""The rooms of docs/design.md §1: imports run one way, down, between modules and between folders.

Every import counts, those inside functions too: a lazy import only moves the moment a cycle is
walked, not the cycle. A file in a sub-package (`profile/engine/`, `profile/hooks/`, ...) is its
folder's room, since importing it runs the folder's `__init__` and a reader meets the folder as one
room; a module at a package's top (`profile/installation.py`) is a room of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, Path]:
    modules = {}
    for path in (ROOT / "hermes_admin").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def _imported(node: ast.AST, package: str, modules: dict[str, Path]) -> set[str]:
    """The modules of ours an import statement names (a name imported from a package counts as its
    module when it is one, else as the package)."""
    if isinstance(node, ast.Import):
        found = set()
        for alias in node.names:
            name = alias.name
            while name and name not in modules:
                name = name.rpartition(".")[0]
            found |= {name} if name else set()
        return found
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
            for a in node.names if f"{base}.{a.name}" in modules or base in modules}


def module_graph() -> dict[str, set[str]]:
    """Each hermes_admin module -> the hermes_admin modules it imports, anywhere in it."""
    modules, graph = _modules(), {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            found |= _imported(node, package, modules)
        graph[name] = found - {name}
    return graph


def room_graph() -> dict[str, set[str]]:
    modules = _modules()
    folders = sorted((n for n, p in modules.items() if p.name == "__init__.py" and n.count(".") >= 1
                      and n != "hermes_admin.profile"), key=len, reverse=True)

    def room(module: str) -> str:
        return next((f"{f}/" for f in folders if module == f or module.startswith(f"{f}.")), module)

    graph: dict[str, set[str]] = {}
    for name, imported in module_graph().items():
        graph.setdefault(room(name), set()).update(room(m) for m in imported)
    return {name: imported - {name} for name, imported in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                other = stack.pop()
                part.append(other)
                if other == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


def test_the_cycle_finder_finds_a_cycle_and_no_other():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_among_modules_function_level_imports_included():
    assert cycles(module_graph()) == []


def test_no_import_cycle_among_rooms():
    """e.g. the installation finder (profile/installation.py) imports no module of engine/ or hooks/,
    which both import it: it reads through plain_files.py and starts profile/in_hermes.py."""
    assert cycles(room_graph()) == []


def test_the_bottom_modules_import_nothing_of_the_package():
    graph = module_graph()
    for bottom in ("hermes_admin.model", "hermes_admin.plain_files", "hermes_admin.profile.in_hermes"):
        assert graph[bottom] == set(), bottom
    for value in ("hermes_admin.layers", "hermes_admin.hook_failures", "hermes_admin.decode"):
        assert graph[value] == set(), value


# The floors docs/design.md §1 names, top down: a module imports only its own floor's and those below.
FLOORS = ("hermes_admin.cli", "hermes_admin.host", "hermes_admin.profile", "hermes_admin.protocol")


def test_imports_run_down_the_named_floors():
    def floor(module: str) -> int:
        if module == "hermes_admin.__main__":  # `python -m hermes_admin`: above them all
            return -1
        return next((i for i, top in enumerate(FLOORS) if module == top or module.startswith(top + ".")),
                    len(FLOORS))  # the package's own modules at the top level: the bottom

    upward = sorted(f"{a} -> {b}" for a, imported in module_graph().items() for b in imported
                    if floor(b) < floor(a))
    assert upward == []


ENGINE = "hermes_admin.profile.engine"


def _reached_inside(path: Path, package: str) -> list[str]:
    """The engine modules a file imports by name, past its front door: `hermes_admin.profile.engine.x`,
    or a module of it taken from the package (`from hermes_admin.profile.engine import outbox`);
    function-level imports included."""
    inner = {p.stem for p in (ROOT / "hermes_admin" / "profile" / "engine").glob("*.py")} - {"__init__"}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith(f"{ENGINE}.")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.startswith(f"{ENGINE}."):
                found.append(base)
            elif base == ENGINE:
                found += [f"{base}.{a.name}" for a in node.names if a.name in inner]
    return found


def test_nothing_outside_the_engine_imports_its_modules():
    """The engine's front door: `hermes_admin.profile.engine` (its `__init__`) is all the rest of the
    package and the benchmarks import of it (tests may reach its modules: they test them)."""
    reached = []
    for path in sorted([*(ROOT / "hermes_admin").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
        relative = path.relative_to(ROOT)
        if relative.parts[:3] == ("hermes_admin", "profile", "engine"):
            continue
        package = ".".join(relative.with_suffix("").parts[:-1])
        reached += [f"{relative}: {name}" for name in _reached_inside(path, package)]
    assert reached == []


def test_the_front_door_guard_sees_an_import_past_it(tmp_path):
    code = tmp_path / "reach.py"
    code.write_text("from hermes_admin.profile.engine import Engine\n"
                    "def f():\n    from hermes_admin.profile.engine.outbox import has_work\n"
                    "    from hermes_admin.profile.engine import space\n    import hermes_admin.profile.engine.pacer\n")
    assert _reached_inside(code, "hermes_admin.profile") == [
        "hermes_admin.profile.engine.outbox", "hermes_admin.profile.engine.space", "hermes_admin.profile.engine.pacer"]


def test_the_front_door_names_what_it_exports():
    import hermes_admin.profile.engine as engine

    assert engine.__all__ and all(hasattr(engine, name) for name in engine.__all__)
