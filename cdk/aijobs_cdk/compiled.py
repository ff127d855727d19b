"""Compiled code in every asset: `.pyc` files that Lambda's own interpreter will use.

Lambda's `/opt` (layers) and `/var/task` (the function's code) are read-only, so an asset that
ships sources only is compiled again by every cold start, and compiling is the larger part of an
import (`make bench`: "import as deployed"). A `.pyc` is only used by the Python minor version
that wrote it, so the build needs an interpreter of the runtime's version (LAMBDA_PYTHON_VERSION),
which need not be the one running the build: it is found by `find_interpreter()` and run as
`python -m compileall --invalidation-mode unchecked-hash` over each staged asset. Unchecked-hash
files are never compared with their source (nothing in an asset changes after it is built), so
the runtime reads them without a `stat` of each source file.

No matching interpreter: the assets ship sources only, and the build says so loudly on stderr
(`MISSING`), with what it costs and how to get one; nothing fails, so a machine without it can
still synth. Where one comes from: `$AIJOBS_LAMBDA_PYTHON`, `python3.13` on PATH, or pyenv's
(`~/.pyenv/versions/3.13.*`, which the project's build machines carry); docs/how-to/deploy.md.

The function code and the aijobs layer are staged compiled into `.cache/compiled/<hash>/` (hash of
their sources, the interpreter's version and FORMAT) and hard-linked into each synth's output, so
a synth compiles them once per change of the code, not once per synth.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from aijobs_cdk import LAMBDA_PYTHON_VERSION, REPO_ROOT

INTERPRETER_ENV = "AIJOBS_LAMBDA_PYTHON"
COMPILED_CACHE_DIR = REPO_ROOT / ".cache" / "compiled"
#: Bump when what a staged tree holds changes for the same sources.
FORMAT = "1"
#: What an asset never ships: caches of the build machine's own Python, and tool caches.
_IGNORED_PARTS = ("__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache")
IGNORED = shutil.ignore_patterns(*_IGNORED_PARTS, "*.pyc")

MISSING = f"""
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!! aijobs: no Python {LAMBDA_PYTHON_VERSION} here to compile the Lambda assets: they ship SOURCES ONLY.
!! Every cold start will compile pydantic, powertools and aijobs from source (`make bench`,
!! "import as deployed": about 2.5x the import time of compiled assets).
!! Install Python {LAMBDA_PYTHON_VERSION} (e.g. `pyenv install {LAMBDA_PYTHON_VERSION}`) or set
!! {INTERPRETER_ENV} to one, then synth again.
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


def _version_of(interpreter: str) -> str | None:
    try:
        # A fixed probe of a candidate interpreter's version (found below, or the user's setting).
        out = subprocess.run(  # noqa: S603
            [interpreter, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _candidates() -> Iterator[str]:
    configured = os.environ.get(INTERPRETER_ENV)
    if configured:
        yield configured
        return  # a setting is obeyed, never second-guessed
    if f"{sys.version_info.major}.{sys.version_info.minor}" == LAMBDA_PYTHON_VERSION:
        yield sys.executable
    name = f"python{LAMBDA_PYTHON_VERSION}"
    found = shutil.which(name)
    if found:
        yield found
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    # Newest patch release first (3.13.10 after 3.13.9: compared as numbers).
    versions = sorted(
        pyenv.glob(f"{LAMBDA_PYTHON_VERSION}.*"),
        key=lambda path: [int(part) if part.isdigit() else -1 for part in path.name.split(".")],
        reverse=True,
    )
    for version in versions:
        yield str(version / "bin" / name)
    yield f"/usr/bin/{name}"


@cache
def find_interpreter() -> str | None:
    """A Python of LAMBDA_PYTHON_VERSION's minor version to compile with, or None."""
    for candidate in _candidates():
        if _version_of(candidate) == LAMBDA_PYTHON_VERSION:
            return candidate
    return None


_warned = False


def warn_missing() -> None:
    """Say, once per process, that the assets ship sources only."""
    global _warned
    if not _warned:
        print(MISSING, file=sys.stderr)
        _warned = True


def compile_tree(root: Path, interpreter: str | None = None) -> bool:
    """Compile every `.py` under `root` in place for Lambda's Python; False (and the warning)
    when there is no interpreter for it. A file that does not compile fails the build."""
    interpreter = interpreter or find_interpreter()
    if interpreter is None:
        warn_missing()
        return False
    command = [
        interpreter, "-m", "compileall", "-q", "-j", "0",
        "--invalidation-mode", "unchecked-hash", str(root),
    ]  # fmt: skip
    # A fixed command: the interpreter found above (or the user's setting) and a path we staged.
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        detail = (result.stdout + result.stderr).strip()[-2000:]
        raise RuntimeError(f"compiling {root} with {interpreter} failed:\n{detail}")
    return True


def source_hash(source: Path) -> str:
    """Identifies a staged tree: its sources (paths and bytes), the compiler's version, FORMAT."""
    digest = hashlib.sha256(f"{FORMAT}|{LAMBDA_PYTHON_VERSION}|{find_interpreter() is not None}".encode())
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if not path.is_file() or path.suffix == ".pyc" or set(_IGNORED_PARTS) & set(relative.parts):
            continue
        digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def staged(source: Path, cache: Path = COMPILED_CACHE_DIR) -> Path:
    """`source` copied and compiled into the cache (once per hash); the folder that holds it."""
    destination = cache / f"{source.name}-{source_hash(source)[:32]}"
    if destination.is_dir():
        return destination
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache))
    try:
        tree = scratch / "tree"
        shutil.copytree(source, tree, ignore=IGNORED)
        compile_tree(tree)
        try:
            tree.rename(destination)
        except OSError:
            if not destination.is_dir():
                raise
            # Another process staged the same hash first: the same content.
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return destination


def link_tree(source: Path, output_dir: Path) -> None:
    """Hard-link a staged tree's files into a CDK bundling output folder (copies across devices)."""
    shutil.copytree(source, output_dir, copy_function=_link_or_copy, dirs_exist_ok=True)


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:  # another file system (e.g. cdk.out under /tmp), or links not supported
        shutil.copy2(source, destination)
