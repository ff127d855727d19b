"""The dependency layer build: cross-platform pip options and pins that match the tested versions."""

from __future__ import annotations

import re
from pathlib import Path

from aijobs_cdk import DEPS_REQUIREMENTS, LAMBDA_PYTHON_VERSION, REPO_ROOT
from scripts.build_deps_layer import pip_command


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", line)
            assert match, f"{path.name}: {line!r} is not pinned with =="
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return pins


def test_pip_command_cross_installs_binary_wheels_for_the_lambda_runtime(tmp_path: Path) -> None:
    command = pip_command(tmp_path / "python")
    assert command[1:4] == ["-m", "pip", "install"]
    assert "--only-binary=:all:" in command
    assert "--no-deps" in command  # boto3/botocore come from the runtime; everything else is pinned
    assert command[command.index("--python-version") + 1] == LAMBDA_PYTHON_VERSION
    platforms = [command[i + 1] for i, arg in enumerate(command) if arg == "--platform"]
    assert platforms
    assert all(platform.endswith("_aarch64") for platform in platforms)
    assert command[command.index("--target") + 1] == str(tmp_path / "python")
    assert "docker" not in " ".join(command).lower()


def test_layer_pins_every_dependency_at_the_version_the_tests_run() -> None:
    layer = _pins(DEPS_REQUIREMENTS)
    tested = _pins(REPO_ROOT / "requirements" / "dev.txt")
    assert {"aws-lambda-powertools", "pydantic", "pydantic-core"} <= set(layer)
    assert "boto3" not in layer
    assert "botocore" not in layer
    mismatched = {
        name: (version, tested.get(name)) for name, version in layer.items() if tested.get(name) != version
    }
    assert mismatched == {}
