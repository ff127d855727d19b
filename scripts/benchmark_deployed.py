"""Each handler's import as Lambda runs it: from the built assets, with no writable cache.

`scripts/benchmark.py` measures imports on this machine's Python from the repository, with the
`.pyc` files its earlier runs wrote: warm figures. A cold start in Lambda imports from read-only
assets (`/var/task`, `/opt`) with the runtime's Python, so it pays whatever the assets do not
ship compiled. This part builds what synth ships, for this machine's architecture (the deployed
layer holds arm64 binaries), and imports each handler with the runtime's Python version, `-B`
(nothing written), in fresh interpreters, three ways:

- **as deployed**: the assets as synth builds them (aijobs_cdk.compiled: unchecked-hash `.pyc`);
- **sources only**: the same trees without any `.pyc` (what a build without a Python of the
  runtime's version ships: every cold start compiles);
- **warm**: the sources-only trees after one import wrote ordinary `.pyc` files (what a second
  import in the same environment would pay; the floor for the other two).

boto3 and its dependencies stand in for the runtime's own copy, compiled as the runtime ships it.
Figures are ratios against warm in the same run (median of `--repeat`). Goal: as deployed within
1.1x of warm.

    .venv/bin/python scripts/benchmark_deployed.py [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench-deployed"
HANDLERS = ("api", "queue_consumer", "dlq_consumer", "cron_dispatcher")
#: What the Lambda Python runtime provides itself, pinned where the tests pin them.
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3")

PROBE = """
import sys, time
sys.path[:0] = {paths!r}
started = time.process_time()
import {module}
print(time.process_time() - started)
"""


class DeployedImportError(RuntimeError):
    """The runtime's Python, or the assets for this machine, are not available."""


def _pins(names: tuple[str, ...]) -> str:
    wanted = {name.lower() for name in names}
    lines = []
    for line in (ROOT / "requirements" / "dev.txt").read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.split("#", 1)[0].strip())
        if match and match.group(1).lower() in wanted:
            lines.append(f"{match.group(1)}=={match.group(2)}")
    return "\n".join(sorted(lines)) + "\n"


def _trees() -> tuple[str, dict[str, list[Path]]]:
    """The runtime's interpreter, and each variant's sys.path entries (function code first)."""
    from aijobs_cdk import CODE_LAYER_DIR, FUNCTIONS_DIR, compiled, deps_layer, wheel_platforms

    interpreter = compiled.find_interpreter()
    if interpreter is None:
        raise DeployedImportError(compiled.MISSING)
    platforms = wheel_platforms(platform.machine())
    runtime_lock = CACHE / "runtime-requirements.txt"
    CACHE.mkdir(parents=True, exist_ok=True)
    runtime_lock.write_text(_pins(RUNTIME_PACKAGES))
    try:
        deps = deps_layer.ensure_built(cache=CACHE / "layers", wheel_platforms=platforms) / "python"
        runtime = deps_layer.ensure_built(runtime_lock, CACHE / "layers", platforms) / "python"
    except deps_layer.DepsLayerBuildError as error:
        raise DeployedImportError(str(error)) from error
    deployed = [compiled.staged(FUNCTIONS_DIR), compiled.staged(CODE_LAYER_DIR) / "python", deps]
    variants = {"as deployed": [*deployed, runtime]}
    for variant in ("sources only", "warm"):
        copies = []
        for index, tree in enumerate(deployed):
            copy = CACHE / variant.replace(" ", "-") / str(index)
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__"))
            copies.append(copy)
        variants[variant] = [*copies, runtime]
    return interpreter, variants


def _import_cpu(interpreter: str, module: str, paths: list[Path], *, write: bool = False) -> float:
    from aijobs_cdk import LAMBDA_ONLY_ENV

    code = PROBE.format(paths=[str(path) for path in paths], module=module)
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1", "LANG": "C.UTF-8", **LAMBDA_ONLY_ENV}
    flags = ["-s"] if write else ["-s", "-B"]
    # A fixed probe run by the runtime's interpreter (aijobs_cdk.compiled found it).
    out = subprocess.run(
        [interpreter, *flags, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return float(out.stdout.strip())


def deployed_imports(repeat: int) -> dict[str, float]:
    interpreter, variants = _trees()
    for name in HANDLERS:  # the warm copies get their ordinary .pyc files, once
        _import_cpu(interpreter, f"{name}.handler", variants["warm"], write=True)
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeat):  # interleaved, so a noisy moment hits every variant alike
        for name in HANDLERS:
            for variant, paths in variants.items():
                seconds = _import_cpu(interpreter, f"{name}.handler", paths)
                samples.setdefault((name, variant), []).append(seconds)
    cpu = {key: statistics.median(values) for key, values in samples.items()}
    figures: dict[str, float] = {}
    for name in HANDLERS:
        warm = cpu[(name, "warm")]
        figures[f"import as deployed CPU {name} vs warm"] = cpu[(name, "as deployed")] / warm
        figures[f"import from sources only CPU {name} vs warm"] = cpu[(name, "sources only")] / warm
    for name in HANDLERS:
        figures[f"(import warm {name}: CPU ms)"] = cpu[(name, "warm")] * 1000
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5, help="fresh interpreters per figure")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        figures = deployed_imports(args.repeat)
    except DeployedImportError as error:
        print(f"benchmark_deployed.py: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    width = max(len(name) for name in figures)
    for name, value in figures.items():
        goal = "<= 1.1x" if name.startswith("import as deployed") else ""
        print(f"{name:<{width}}  {value:8.2f}  {goal}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
