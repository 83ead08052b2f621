"""The engine's shape, kept: short functions, no lazy imports inside it, and no click or report in it
(no import cycle anywhere: test_rooms.py)."""

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
