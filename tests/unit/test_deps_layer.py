"""The dependency layer build: cross-platform pip options, the cache, and pins that match the tests."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from aijobs_cdk import DEPS_LAYER_CACHE_DIR, DEPS_REQUIREMENTS, LAMBDA_PYTHON_VERSION, REPO_ROOT, deps_layer
from aijobs_cdk.deps_layer import DepsLayerBuildError, ensure_built, layer_hash, pip_command, stage


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


_PIP_ERROR = "ERROR: No matching distribution found for x==1"
_INSTALL_PKG = (
    "import pathlib, sys; package = pathlib.Path(sys.argv[1], 'pkg'); "
    "package.mkdir(parents=True); (package / '__init__.py').touch()"
)


class FakePip:
    """Stands in for pip: installs one package (or fails like pip does) and counts its runs."""

    def __init__(self, *, fails: bool = False) -> None:
        self.fails = fails
        self.runs = 0

    def __call__(
        self, target: Path, requirements: Path = DEPS_REQUIREMENTS, *_platforms: object
    ) -> list[str]:
        self.runs += 1
        if self.fails:
            return [sys.executable, "-c", "import sys; sys.exit(sys.argv[1])", _PIP_ERROR]
        return [sys.executable, "-c", _INSTALL_PKG, str(target)]


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text("pkg==1.0\n")
    return path


def test_layer_hash_follows_the_lock_and_the_target_python(
    lock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = layer_hash(lock)
    assert layer_hash(lock) == first
    lock.write_text("pkg==1.1\n")
    assert layer_hash(lock) != first
    bumped = layer_hash(lock)
    monkeypatch.setattr(deps_layer, "LAMBDA_PYTHON_VERSION", "3.12")
    assert layer_hash(lock) != bumped


def test_an_unchanged_lock_is_built_once_then_staged_from_the_cache(
    tmp_path: Path, lock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = FakePip()
    monkeypatch.setattr(deps_layer, "pip_command", pip)
    cache = tmp_path / "cache"
    layer = ensure_built(lock, cache)
    assert layer == cache / layer_hash(lock)
    assert (layer / "python" / "pkg" / "__init__.py").is_file()
    for out in ("asset.a", "asset.b"):
        stage(tmp_path / out, lock, cache)
        assert (tmp_path / out / "python" / "pkg" / "__init__.py").is_file()
    assert pip.runs == 1
    assert [path.name for path in cache.iterdir()] == [layer.name]  # no scratch folders left


def test_a_failed_build_explains_the_fix_and_leaves_nothing_behind(
    tmp_path: Path, lock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deps_layer, "pip_command", FakePip(fails=True))
    cache = tmp_path / "cache"
    with pytest.raises(DepsLayerBuildError) as failure:
        stage(tmp_path / "asset", lock, cache)
    message = str(failure.value)
    assert "ERROR: No matching distribution found for x==1" in message
    assert "make deps-layer" in message
    assert deps_layer.CACHE_ENV in message
    assert str(cache / layer_hash(lock) / "python") in message
    assert list(cache.iterdir()) == []
    assert not (tmp_path / "asset").exists()


def test_the_cache_lives_in_the_repo_unless_pointed_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(deps_layer.CACHE_ENV, raising=False)
    assert deps_layer.cache_dir() == DEPS_LAYER_CACHE_DIR
    assert DEPS_LAYER_CACHE_DIR.is_relative_to(REPO_ROOT)
    monkeypatch.setenv(deps_layer.CACHE_ENV, str(tmp_path))
    assert deps_layer.cache_dir() == tmp_path
