"""The engine's shape, kept: short functions, no import cycles, and no click or report in it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "hermes_admin" / "profile" / "engine"


def test_no_function_of_the_engine_is_longer_than_50_lines():
    long = []
    for path in sorted(ENGINE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 50:
                long.append(f"{path.name}:{node.name}")
    assert long == []


def test_the_facade_stays_small():
    assert len((ENGINE / "engine.py").read_text().splitlines()) < 400


def test_no_lazy_imports_between_engine_modules():
    lazy = []
    for path in sorted(ENGINE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lazy += [f"{path.name}:{node.name}" for sub in ast.walk(node)
                         if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("hermes_admin.profile.engine")]
    assert lazy == []


def _module_imports() -> dict[str, set[str]]:
    """Each hermes_admin module -> the hermes_admin modules it imports at module level."""
    modules = {}
    for path in (ROOT / "hermes_admin").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {m for m in [node.module, *(f"{node.module}.{a.name}" for a in node.names)] if m in modules}
        graph[name] = found - {name}
    return graph


def test_no_import_cycles_inside_hermes_admin():
    graph, cycles = _module_imports(), []
    for name in sorted(graph):  # can a module reach itself through what it imports?
        seen, todo = set(), list(graph[name])
        while todo:
            other = todo.pop()
            if other == name:
                cycles.append(name)
                break
            if other not in seen:
                seen.add(other)
                todo += graph[other]
    assert cycles == []


def test_the_engine_imports_neither_click_nor_report():
    code = ("import sys, hermes_admin.profile.engine.engine; "
            "print(sorted(m for m in ('click', 'hermes_admin.report') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == "[]", done.stderr


def test_sql_runs_only_in_the_store_modules():
    """SQL against Hermes' store lives in profile/store/; outside it only our own outbox.db
    (outbox.py), the checkpoint thread's own connection (checkpointer.py) and the synthetic
    stores of tests (synth/) run statements."""
    allowed = {"profile/engine/outbox.py", "profile/engine/checkpointer.py"}
    found = []
    for path in sorted((ROOT / "hermes_admin").rglob("*.py")):
        name = path.relative_to(ROOT / "hermes_admin").as_posix()
        if name.startswith(("profile/store/", "synth/")) or name in allowed:
            continue
        text = path.read_text()
        if "execute_sql(" in text or ".execute(" in text:
            found.append(name)
    assert found == []
