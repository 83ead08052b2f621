"""Hermes' managed scope when root runs over users' homes: the host resolves the folder from root's own
environment, reads the file (root's alone, or nothing runs), and each user's worker applies what it
was handed, with the managed file as the origin; a user's folder named under `sudo -E` is refused."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.root.conftest import build_user_root, chown_tree


@pytest.fixture
def managed_folder():
    """A managed folder of root's in /var/tmp (0755, its config.yaml 0644), removed afterwards."""
    made = []

    def make(text: str) -> Path:
        folder = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="ha-managed-"))
        os.chmod(folder, 0o755)
        (folder / "config.yaml").write_text(text)
        os.chmod(folder / "config.yaml", 0o644)
        made.append(folder)
        return folder

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def _her_config(root: Path, user, sessions: dict) -> None:
    (root / "config.yaml").write_text(yaml.safe_dump({"sessions": sessions}))
    chown_tree(root, user)


def test_her_worker_applies_the_managed_scope_root_read(make_user, admin, managed_folder):
    alice = make_user("alice")
    build_user_root(alice, {"default": 30})
    _her_config(alice.root, alice, {"auto_prune": True, "retention_days": 30, "auto_archive": True})
    folder = managed_folder("sessions:\n  retention_days: 3650\n  auto_archive: false\n")

    done = admin("--root", str(alice.root), "run", "--dry-run", "--json", env={"HERMES_MANAGED_DIR": str(folder)})
    assert done.returncode in (0, 1), done.stderr
    policy = json.loads(done.stdout)["policies"][str(alice.root)]
    assert (policy["retention_days"], policy["auto_archive"], policy["auto_prune"]) == (3650, False, True)
    assert policy["origins"]["retention_days"] == f"{folder / 'config.yaml'}: sessions.retention_days"
    assert policy["origins"]["auto_prune"] == f"{alice.root / 'config.yaml'}: sessions.auto_prune"

    # her own environment names no managed folder: root's does, and decides
    done = admin("--root", str(alice.root), "run", "--dry-run", "--json",
                 env={"HERMES_MANAGED_DIR": str(alice.home / "nothing-here")})
    assert json.loads(done.stdout)["policies"][str(alice.root)]["retention_days"] == 30


def test_a_managed_folder_a_user_may_write_is_refused_as_root(make_user, admin, managed_folder):
    alice = make_user("alice")
    build_user_root(alice, {"default": 30})
    _her_config(alice.root, alice, {"auto_prune": True, "retention_days": 30})
    theirs = alice.home / "managed"  # what `sudo -E` hands root: her folder, with her retention of one day
    theirs.mkdir()
    (theirs / "config.yaml").write_text("sessions:\n  retention_days: 1\n")
    chown_tree(theirs, alice)
    done = admin("--root", str(alice.root), "run", "--json", env={"HERMES_MANAGED_DIR": str(theirs)})
    assert done.returncode == 78, done.stderr
    assert "refusing it as root" in done.stderr and "HERMES_MANAGED_DIR" in done.stderr

    loose = managed_folder("sessions:\n  retention_days: 1\n")
    os.chmod(loose / "config.yaml", 0o666)  # root's, but anybody may write it
    done = admin("--root", str(alice.root), "run", "--json", env={"HERMES_MANAGED_DIR": str(loose)})
    assert done.returncode == 78 and "not root's alone" in done.stderr, done.stderr
