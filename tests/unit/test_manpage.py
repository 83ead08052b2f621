"""The man page is generated from the CLI: the committed file is what the generator writes now."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from hermes_admin.cli import manpage
from hermes_admin.cli.main import COMMANDS


def test_the_man_page_is_up_to_date():
    assert manpage.PAGE.read_text() == manpage.render(), \
        "run `python -m hermes_admin.cli.manpage` and commit man/hermes-admin.1"


def test_it_names_every_command_and_exit_code():
    text = manpage.render()
    for name in COMMANDS:
        assert f"\\fB{name.replace('-', chr(92) + '-')}" in text, name
    for code, _ in manpage.EXIT_STATUS:
        assert f"\\fB{code}\\fR" in text


def test_it_is_installed_with_the_package():
    import tomllib

    data_files = tomllib.loads((manpage.PAGE.parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    assert data_files["share/man/man1"] == ["man/hermes-admin.1"]


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff not installed")
def test_groff_reads_it_without_warnings():
    done = subprocess.run(["groff", "-man", "-Tutf8", "-ww", str(manpage.PAGE)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr
