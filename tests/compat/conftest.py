"""The compat tier: stores written by the real Hermes Agent releases (0.19.0 by default; 0.20.1 and
0.22.2 too in test_compat_releases.py).

Every test here is marked `compat`. Each release's venv is created on first use
and cached (see tests/peer.py); set HERMES_ADMIN_SKIP_COMPAT=1 to leave the
tier out of a quick local run (CI never sets it).
"""

from __future__ import annotations

import os

import pytest

from tests import peer


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/compat/" in str(item.fspath):
            item.add_marker(pytest.mark.compat)


@pytest.fixture(scope="session")
def hermes_peer():
    if os.environ.get("HERMES_ADMIN_SKIP_COMPAT") == "1":
        pytest.skip("HERMES_ADMIN_SKIP_COMPAT=1: compat tier left out of this run")
    for release in peer.RELEASES:
        peer.ensure_venv(release)
    return peer
