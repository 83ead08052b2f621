"""Helpers shared by the engine and hook tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

TEST_PLUGINS = Path(__file__).parent / "plugins"
SHIPPED_PLUGINS = Path(__file__).parent.parent / "plugins"


def install_plugins(home: Path, installed: list[str], enabled: list[str], timeout: float | None = None,
                    disabled: list[str] = ()) -> None:
    """Copy plugins into a profile home and write its config.yaml's plugins section."""
    for name in installed:
        source = SHIPPED_PLUGINS / name if (SHIPPED_PLUGINS / name).is_dir() else TEST_PLUGINS / name
        shutil.copytree(source, home / "plugins" / name, dirs_exist_ok=True)
    config_path = home / "config.yaml"
    config = (yaml.safe_load(config_path.read_text()) if config_path.exists() else None) or {}
    config["plugins"] = {"enabled": list(enabled), "disabled": list(disabled)}
    if timeout is not None:
        config["plugins"]["hook_callback_timeout"] = timeout
    config_path.write_text(yaml.safe_dump(config))


def events(home: Path, name: str = "recorded-events.jsonl") -> list[dict]:
    path = home / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def home_of(root: Path, profile: str) -> Path:
    return root if profile == "default" else root / "profiles" / profile


def row_ids(db: Path, sql: str = "SELECT id FROM sessions") -> set[str]:
    import sqlite3
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute(sql)}
    finally:
        conn.close()
