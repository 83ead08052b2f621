"""Issue #36: each installed release's own `sessions:` keys and defaults, read through the real probe.

Every release's venv is the compat tier's own (tests/peer.py: made on first use, then cached).
Its own DEFAULT_CONFIG, printed by its own interpreter, is the oracle.
"""

from __future__ import annotations

import json
import pwd
import os
import subprocess
from pathlib import Path

import pytest

from hermes_admin.model import HERMES_SESSIONS_KEYS
from hermes_admin.synth.builder import SynthStore

# What the releases ship, as the issue states it: the oracle must say the same.
FACTS = {"0.19.0": {"auto_prune": False, "vacuum_after_prune": True},
         "0.20.1": {"auto_prune": False, "vacuum_after_prune": True},
         "0.22.2": {"auto_prune": True, "retention_days": 90, "vacuum_after_prune": True}}


def _own_defaults(python: Path, tmp_path: Path) -> dict:
    """DEFAULT_CONFIG["sessions"], as the release's own interpreter has it (a home of its own)."""
    home = tmp_path / "oracle"
    home.mkdir()
    done = subprocess.run(
        [str(python), "-c", "import json; from hermes_cli.config import DEFAULT_CONFIG as D; "
                            "print(json.dumps(D['sessions']))"],
        env={"HOME": str(home), "HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"}, cwd=str(home),
        capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("version", sorted(FACTS))
def test_the_release_s_own_keys_are_known_and_its_defaults_apply(version, hermes_peer, tmp_path, invoke, monkeypatch):
    python = Path(hermes_peer.python(version))
    # The probe runs with the account's own clean environment: its real home must gain nothing
    # (0.22.2 makes `~/.hermes` when its modules are imported without HERMES_HOME).
    real_hermes = Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".hermes"
    there_before = os.path.lexists(real_hermes)
    for name in ("HOME", "XDG_CACHE_HOME", "HERMES_HOME"):  # the probe's cache and Hermes' home: ours only
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    own = _own_defaults(python, tmp_path)
    assert {k: own[k] for k in FACTS[version]} == FACTS[version]

    root = tmp_path / "h"
    SynthStore(root / "state.db", version=30).close()
    # Every key of the release the policy builds no value from, as the release ships it: none is "unknown".
    rest = {k: v for k, v in own.items() if k not in HERMES_SESSIONS_KEYS}
    (root / "config.yaml").write_text("sessions:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in rest.items()))
    admin = tmp_path / "admin.yaml"
    admin.write_text(f"hermes_python: {python}\n")

    done = invoke("--root", str(root), "--config", str(admin), "run", "--dry-run", "--json")
    assert done.exit_code == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert not [w for w in doc["warnings"] if "unknown key" in w]
    chosen = doc["policies"][str(root)]
    assert chosen["hermes"]["installation"]["sessions_keys"] == sorted(own)
    for key in ("auto_prune", "retention_days", "vacuum_after_prune"):
        if key in own:
            assert chosen[key] == own[key]
            assert chosen["origins"][key].startswith(f"defaults of Hermes {version}"), chosen["origins"][key]
    checked = invoke("--root", str(root), "--config", str(admin), "config", "check", "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["warnings"] == []
    assert there_before or not os.path.lexists(real_hermes), f"the probe made {real_hermes}"
