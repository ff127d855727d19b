"""The Lambda dependency layer: the pinned lock installed by pip for Lambda's platform, cached by hash.

No Docker: pip downloads the manylinux wheels for the functions' architecture and Python version
directly (`--platform ... --only-binary=:all: --python-version ...`). Every dependency is pinned in
layers/deps/requirements.txt and installed with `--no-deps`, so boto3/botocore (provided by the
Lambda runtime) are never bundled, not even as aws-xray-sdk's dependency.

Every `.py` is compiled for the runtime's Python (aijobs_cdk.compiled: unchecked-hash `.pyc`, by an
interpreter of LAMBDA_PYTHON_VERSION; without one the layer ships sources and the build says so).

A layer is built once per hash of the lock, the pip options, BUILD_FORMAT and whether it could be
compiled, into
`<cache>/<hash>/python` (cache: `.cache/deps-layer/`, or `$AIJOBS_DEPS_LAYER_CACHE`). `cdk synth`
stages it from there through local bundling (lambda_defaults), and CDK reuses `cdk.out/asset.<hash>`
while the hash is unchanged: only a cache miss needs the package index. No AWS, no Docker.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from aijobs_cdk import (
    DEPS_LAYER_CACHE_DIR,
    DEPS_REQUIREMENTS,
    LAMBDA_ARCHITECTURE,
    LAMBDA_PYTHON_VERSION,
    LAMBDA_WHEEL_PLATFORMS,
    REPO_ROOT,
    compiled,
)

CACHE_ENV = "AIJOBS_DEPS_LAYER_CACHE"
# Bump when the steps after pip change what a layer holds (the pip options are part of the hash).
BUILD_FORMAT = "3"


class DepsLayerBuildError(Exception):
    """The dependency layer could not be built: synth stops rather than ship functions without it."""


def pip_options(wheel_platforms: tuple[str, ...] = LAMBDA_WHEEL_PLATFORMS) -> list[str]:
    """What makes pip install wheels for Lambda instead of for this machine (`wheel_platforms`: the
    benchmark's as-deployed copy for this machine's architecture, scripts/benchmark.py)."""
    platforms = [option for platform in wheel_platforms for option in ("--platform", platform)]
    return [
        "--no-deps", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", LAMBDA_PYTHON_VERSION, *platforms,
    ]  # fmt: skip


def pip_command(
    target: Path,
    requirements: Path = DEPS_REQUIREMENTS,
    wheel_platforms: tuple[str, ...] = LAMBDA_WHEEL_PLATFORMS,
) -> list[str]:
    """The pip invocation that installs the layer's wheels for Lambda into `target`."""
    return [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-color", "--disable-pip-version-check",
        *pip_options(wheel_platforms), "--target", str(target), "-r", str(requirements),
    ]  # fmt: skip


def layer_hash(
    requirements: Path = DEPS_REQUIREMENTS, wheel_platforms: tuple[str, ...] = LAMBDA_WHEEL_PLATFORMS
) -> str:
    """Identifies a layer's content: an unchanged lock for the same platform is never rebuilt (and a
    layer built without its `.pyc` is rebuilt once an interpreter for them is there)."""
    key = {
        "lock": requirements.read_text(),
        "pip": pip_options(wheel_platforms),
        "format": BUILD_FORMAT,
        "compiled": compiled.find_interpreter() is not None,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser().resolve() if configured else DEPS_LAYER_CACHE_DIR


def cached_layer(
    requirements: Path = DEPS_REQUIREMENTS,
    cache: Path | None = None,
    wheel_platforms: tuple[str, ...] = LAMBDA_WHEEL_PLATFORMS,
) -> Path:
    """Where this lock's layer lives (`<cache>/<hash>`, holding `python/`), whether built or not."""
    return (cache or cache_dir()) / layer_hash(requirements, wheel_platforms)


def ensure_built(
    requirements: Path = DEPS_REQUIREMENTS,
    cache: Path | None = None,
    wheel_platforms: tuple[str, ...] = LAMBDA_WHEEL_PLATFORMS,
) -> Path:
    """This lock's layer folder, built with pip first if the cache does not hold it yet."""
    layer = cached_layer(requirements, cache, wheel_platforms)
    if not (layer / "python").is_dir():
        build(layer, requirements, wheel_platforms=wheel_platforms)
    return layer


def stage(output_dir: Path, requirements: Path = DEPS_REQUIREMENTS, cache: Path | None = None) -> None:
    """Put the layer's `python/` into a CDK bundling output folder (built first on a cache miss)."""
    layer = ensure_built(requirements, cache)
    # Hard links: a staged asset is never modified, and linking ~1,200 files is ~7x faster than
    # copying them (every synth of a fresh cdk.out stages the layer once).
    compiled.link_tree(layer / "python", output_dir / "python")


def build(
    destination: Path,
    requirements: Path = DEPS_REQUIREMENTS,
    *,
    replace: bool = False,
    wheel_platforms: tuple[str, ...] = LAMBDA_WHEEL_PLATFORMS,
) -> Path:
    """Install into a scratch folder, then rename it into place, so a failed build never leaves half
    a layer (nor loses the one it would replace) and a concurrent build of the same hash is harmless."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=destination.parent))
    try:
        site = scratch / "python"
        print(
            f"aijobs: building the Lambda dependency layer (pip, Python {LAMBDA_PYTHON_VERSION} "
            f"{_machine(wheel_platforms)}) into {_shown(destination)}",
            file=sys.stderr,
        )
        _install(site, requirements, destination, wheel_platforms)
        for pycache in list(site.rglob("__pycache__")):
            shutil.rmtree(pycache)
        compiled.compile_tree(site)
        if destination.exists() and (replace or not (destination / "python").is_dir()):
            shutil.rmtree(destination)  # or an unfinished folder, e.g. from an interrupted copy by hand
        try:
            scratch.rename(destination)
        except OSError:
            if not (destination / "python").is_dir():
                raise
            # Another process finished the same build first: same hash, same content.
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return destination


def _install(site: Path, requirements: Path, destination: Path, wheel_platforms: tuple[str, ...]) -> None:
    try:
        # A fixed command: this interpreter's pip, options from this module, paths from the repo.
        command = pip_command(site, requirements, wheel_platforms)
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    except OSError as error:
        failure = _failure(f"pip could not start ({error})", requirements, destination)
        raise DepsLayerBuildError(failure) from error
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).strip().splitlines()
        shown = [line for line in lines if line.startswith("ERROR")] or lines[-10:]
        detail = "\n".join("    " + line for line in shown)
        raise DepsLayerBuildError(
            _failure(f"pip exited with {result.returncode}:\n{detail}", requirements, destination)
        )


def _failure(cause: str, requirements: Path, destination: Path) -> str:
    return (
        f"cannot build the Lambda dependency layer (Python {LAMBDA_PYTHON_VERSION}, {LAMBDA_ARCHITECTURE}) "
        f"from {_shown(requirements)}: {cause}\n"
        "Synth stops rather than deploy functions without their packages. Either:\n"
        "  - run `make deps-layer` (or this synth) once with network access to the package index;\n"
        "    pip caches the layer and later synths need no network; or\n"
        "  - copy a layer that `make deps-layer` built elsewhere from the same requirements file, or\n"
        f"    set {CACHE_ENV} to the folder holding it. The layer for this lock is:\n"
        f"    {_shown(destination)}/python"
    )


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _machine(wheel_platforms: tuple[str, ...]) -> str:
    if wheel_platforms == LAMBDA_WHEEL_PLATFORMS:
        return LAMBDA_ARCHITECTURE
    return ", ".join(wheel_platforms)  # e.g. the benchmark's copy for this machine
