"""Build the Lambda dependency layer into build/deps-layer/ with pip's cross-platform options.

No Docker: pip downloads the arm64 manylinux wheels for the Lambda Python version directly
(`--platform ... --only-binary=:all: --python-version ...`). Every dependency is pinned in
layers/deps/requirements.txt and installed with `--no-deps`, so boto3/botocore (provided by the
Lambda runtime) are never bundled. Run: `make deps-layer` (then `make deploy`).
"""

from __future__ import annotations

import compileall
import py_compile
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from aijobs_cdk import DEPS_LAYER_BUILD_DIR, DEPS_REQUIREMENTS, LAMBDA_PYTHON_VERSION, LAMBDA_WHEEL_PLATFORMS


def pip_command(target: Path, requirements: Path = DEPS_REQUIREMENTS) -> list[str]:
    """The pip invocation that installs the layer's wheels for Lambda into `target`."""
    platforms = [option for platform in LAMBDA_WHEEL_PLATFORMS for option in ("--platform", platform)]
    return [
        sys.executable, "-m", "pip", "install",
        "--quiet", "--disable-pip-version-check",
        "--no-deps", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", LAMBDA_PYTHON_VERSION, *platforms,
        "--target", str(target), "-r", str(requirements),
    ]  # fmt: skip


def build(destination: Path = DEPS_LAYER_BUILD_DIR) -> Path:
    """Install into a scratch folder, then swap it in, so a failed build never leaves half a layer."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="deps-layer-", dir=destination.parent))
    try:
        site = scratch / "python"
        subprocess.run(pip_command(site), check=True)
        for cache in site.rglob("__pycache__"):
            shutil.rmtree(cache)
        _compile_if_possible(site)
        if destination.exists():
            shutil.rmtree(destination)
        scratch.rename(destination)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return destination


def _compile_if_possible(site: Path) -> None:
    """Ship .pyc files (Lambda cannot write them to /opt) when this Python matches the runtime."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != LAMBDA_PYTHON_VERSION:
        print(
            f"note: Python {running} cannot pre-compile for Lambda {LAMBDA_PYTHON_VERSION}; "
            "shipping sources only"
        )
        return
    compileall.compile_dir(site, quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)


def main() -> None:
    layer = build()
    size = sum(path.stat().st_size for path in layer.rglob("*") if path.is_file())
    packages = sorted(path.name for path in (layer / "python").iterdir() if path.is_dir())
    print(f"dependency layer built in {layer} ({size / 1e6:.1f} MB): {', '.join(packages)}")


if __name__ == "__main__":
    main()
