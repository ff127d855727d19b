"""scripts/benchmark.py keeps working, and the call counts it prints are the floors (counts, not
times: nothing here measures speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_prints_every_path_at_its_floor() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/benchmark.py"), "--only", "calls", "--jobs", "3", "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    figures = json.loads(out.stdout)
    from scripts.benchmark import FLOORS

    for name, floor in FLOORS.items():
        # A warm consumer per job (it knows the user's shard and the retention), give or take the
        # throttle counter's flush.
        assert figures[name] == pytest.approx(floor, abs=0.34), name
    assert figures["consumer per final failure (400)"] == pytest.approx(2, abs=0.34)


def test_the_deployed_import_benchmark_measures_what_it_says() -> None:
    """Its three variants are what they claim: the assets as synth builds them (every module with
    the runtime's unchecked .pyc), the same trees with no .pyc at all, and the warm copy."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import benchmark_deployed  # type: ignore[import-not-found]  # scripts/ is not a package
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    from aijobs_cdk import LAMBDA_PYTHON_VERSION

    interpreter, variants = benchmark_deployed._trees()
    tag = f"cpython-{LAMBDA_PYTHON_VERSION.replace('.', '')}"
    for root in variants["as deployed"]:
        for source in root.rglob("*.py"):
            assert (source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc").is_file(), source
    runtime = variants["as deployed"][-1]
    assert (runtime / "boto3" / "__init__.py").is_file()
    for variant in ("sources only", "warm"):
        *copies, shared = variants[variant]
        assert shared == runtime  # the runtime's own packages are compiled in every variant
        assert [path.name for copy in copies for path in copy.rglob("*.pyc")] == []
        assert len(copies) == len(variants["as deployed"]) - 1
    benchmark_deployed._import_cpu(interpreter, "api.handler", variants["warm"], write=True)
    warm_code = variants["warm"][1]  # the aijobs layer's copy: ordinary .pyc now, checked by time stamp
    pyc = next(warm_code.rglob(f"domain.{tag}.pyc"))
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0
