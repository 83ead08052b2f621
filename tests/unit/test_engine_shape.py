"""The engine's shape, kept: short functions, no lazy imports inside it, and no click or report in it
(no import cycle anywhere: test_rooms.py)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


# What SQL looks like in a string: a statement's first words (help texts and messages begin in
# sentence case, and `VACUUM` alone is a statement while "VACUUM afterwards ..." is prose), or one of
# SQLite's functions or clauses inside an expression.
SQL_STATEMENT = re.compile(r"""\s*\(?\s*(
    SELECT\b | (INSERT|REPLACE)(\s+OR\s+[A-Z]+)?(\s+INTO\b|\s*$|\s+\{\}) | UPDATE\s+\S+\s+SET\b | DELETE\s+FROM\b
    | PRAGMA\b | (CREATE|DROP|ALTER)\s+(TEMP\w*\s+|UNIQUE\s+|VIRTUAL\s+)*(TABLE|INDEX|TRIGGER|VIEW)\b
    | WITH\s+(RECURSIVE\b|\w+\s+AS\b) | (VACUUM|ANALYZE|REINDEX|COMMIT|ROLLBACK)\s*;?\s*$ | VACUUM\s+INTO\b
    | BEGIN(\s+(DEFERRED|IMMEDIATE|EXCLUSIVE))?\s*$ | (SAVEPOINT|RELEASE|ATTACH|DETACH)\s)""", re.X)
SQL_PIECE = re.compile(r"\b(COALESCE|LENGTH|TOTAL|COUNT|SUM|MAX|MIN|IFNULL|json_extract|json_valid)\(|"
                       r"\b(FROM|WHERE|GROUP BY|ORDER BY|JOIN|IS NULL|IS NOT NULL|NOT EXISTS)\b")
# The calls that run SQL text or build it: a connection's, and the store's own low-level helpers.
LOW_LEVEL = {"execute_sql", "execute", "executemany", "executescript", "dicts", "insert_row", "marks"}
# Outside profile/store/ only our own outbox.db, the checkpoint thread's own connection and the
# synthetic stores of tests (synth/) run statements.
ALLOWED = {"profile/engine/outbox.py", "profile/engine/checkpointer.py"}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's with `{}` where its values go."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def sql_in(source: str) -> list[str]:
    """Where a module's code holds SQL text or runs it: "line: what"."""
    tree = ast.parse(source)
    docs, inner = _docstrings(tree), {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []
    for node in ast.walk(tree):
        if id(node) in docs or id(node) in inner:
            continue
        text = _text(node)
        if text is not None and (SQL_STATEMENT.match(text) or SQL_PIECE.search(text)):
            found.append(f"{node.lineno}: {text[:60]!r}")
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name in LOW_LEVEL:
                found.append(f"{node.lineno}: {name}()")
    return found


def test_sql_runs_only_in_the_store_modules():
    """SQL against Hermes' store lives in profile/store/: no statement, piece of one, or call that
    runs or builds one anywhere else (but ALLOWED)."""
    found = []
    for path in sorted((ROOT / "hermes_admin").rglob("*.py")):
        name = path.relative_to(ROOT / "hermes_admin").as_posix()
        if name.startswith(("profile/store/", "synth/")) or name in ALLOWED:
            continue
        found += [f"{name}:{where}" for where in sql_in(path.read_text())]
    assert found == []


@pytest.mark.parametrize("code", [
    'db.execute_sql("SELECT 1")',
    'rows = dicts(db, f"SELECT * FROM session_model_usage WHERE session_id IN ({marks(part)})", part)',
    'rows("SELECT * FROM sessions WHERE id = ?", [sid])',
    'insert_row(db, table, row, columns, f"INSERT {conflict}".strip())',
    'verb = f"INSERT {conflict}"',
    '_insert(db, "system_prompts", columns, prompt, "INSERT OR IGNORE")',
    'size = text_size(store, "COALESCE(LENGTH({}), 0)")',
    'q = f"UPDATE {table} SET pinned = 1"',
    'conn.execute("VACUUM")',
    'only = "s.ended_at IS NULL"',
])
def test_the_sql_guard_sees_sql(code):
    assert sql_in(code) != []


@pytest.mark.parametrize("code", [
    '"""SELECT * order: a docstring may name SQL."""',
    'help_text = "VACUUM afterwards if over 25 % of pages are free"',
    'doc = "Delete ended sessions that never got a message"',
    'reason = "delete"',
    'text = f"delete this copy (profile {name})"',
])
def test_the_sql_guard_leaves_prose_alone(code):
    assert sql_in(code) == []


# What an engine keeps to itself: its collaborators and what it gathers. A caller asks the engine
# (its methods) or takes what its calls, `open()` and `close()` return; it never reaches through.
KEPT = {"pacer", "outbox", "aftermath", "deletes", "space", "locks", "commits", "turns", "fts", "bus",
        "checkpointer", "remover", "export", "config", "tokenizer", "notes", "recovered", "replayed",
        "exports_removed"}
ENGINE_NAMES = {"engine", "source", "target"}  # what the callers name an engine


def reached_through(source: str) -> list[str]:
    """Where a module reaches through an engine: `engine.pacer`, `self.engine.outbox`, `engine.store.db`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        holder = node.value
        named = (isinstance(holder, ast.Name) and holder.id in ENGINE_NAMES) or (
            isinstance(holder, ast.Attribute) and holder.attr == "engine")
        if named and node.attr in KEPT:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif node.attr == "db" and isinstance(holder, ast.Attribute) and holder.attr == "store" and (
                (isinstance(holder.value, ast.Name) and holder.value.id in ENGINE_NAMES)
                or (isinstance(holder.value, ast.Attribute) and holder.value.attr == "engine")):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_caller_reaches_through_an_engine():
    found = []
    for path in sorted((ROOT / "hermes_admin").rglob("*.py")):
        if ENGINE in path.parents:
            continue
        found += [f"{path.relative_to(ROOT)}:{where}" for where in reached_through(path.read_text())]
    assert found == []


@pytest.mark.parametrize("code", ["engine.pacer.write(f, 1, r, 'x')", "self.engine.store.db", "x = engine.notes",
                                  "target.outbox.back(ids)", "source.deletes.blocked(db, ids)"])
def test_the_reach_guard_sees_a_reach(code):
    assert reached_through(code) != []


@pytest.mark.parametrize("code", ["engine.store", "engine.read(pages)", "closed.notes", "engine.close().notes",
                                  "self.engine.profile.name", "engine.delete(units, 'x')"])
def test_the_reach_guard_leaves_the_front_alone(code):
    assert reached_through(code) == []
