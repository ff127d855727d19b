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
