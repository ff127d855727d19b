"""What a fork needs to follow upstream: a license, one version, and a changelog that names it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import aijobs

ROOT = Path(__file__).resolve().parents[2]


def test_the_license_is_the_one_the_package_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a pointer to it


def test_the_version_has_one_home_and_the_changelog_starts_with_it() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "aijobs.__version__"}
    headings = re.findall(r"^## (\d+\.\d+\.\d+)\b", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == aijobs.__version__
    # Newest first, each version once.
    versions = [tuple(int(part) for part in heading.split(".")) for heading in headings]
    assert versions == sorted(set(versions), reverse=True)


def test_the_cli_says_its_version() -> None:
    from typer.testing import CliRunner

    from aijobs_cli.main import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"aijobs {aijobs.__version__}"
