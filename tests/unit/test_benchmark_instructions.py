"""scripts/benchmark.py --instructions: reading valgrind's count, and failing clearly without it
(valgrind itself is not run here: one count takes seconds to minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts.benchmark import InstructionCountError, parse_instruction_count

ROOT = Path(__file__).resolve().parents[2]

# What `valgrind --tool=cachegrind --cache-sim=no python -c "import boto3"` prints on stderr.
CACHEGRIND = """==17752== Cachegrind, a cache and branch-prediction profiler
==17752== Copyright (C) 2002-2017, and GNU GPL'd, by Nicholas Nethercote et al.
==17752== Using Valgrind-3.19.0 and LibVEX; rerun with -h for copyright info
==17752== Command: /work/main/.venv/bin/python -c import\\ boto3
==17752==
--17752-- warning: L3 cache found, using its data for the LL simulation.
==17752==
==17752== I   refs:      693,251,979
"""


def test_the_count_is_read_from_cachegrinds_summary() -> None:
    assert parse_instruction_count(CACHEGRIND) == 693_251_979


@pytest.mark.parametrize(
    "output",
    [
        CACHEGRIND.rsplit("==17752== I", 1)[0],  # cut before the summary (valgrind killed)
        CACHEGRIND.replace("693,251,979", ""),  # the line without its figure
        "valgrind: failed to start tool 'cachegrind' for platform 'amd64-linux'\n",
        "print('I   refs:      12')\n",  # the program's own output, not valgrind's summary line
    ],
)
def test_output_without_the_count_is_an_error_not_a_figure(output: str) -> None:
    with pytest.raises(InstructionCountError, match="no instruction count"):
        parse_instruction_count(output)


def test_the_mode_fails_with_a_clear_message_when_valgrind_is_missing(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/benchmark.py"), "--only", "imports", "--instructions"],
        capture_output=True, text=True, cwd=ROOT, env={"PATH": str(tmp_path)}, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--instructions needs valgrind" in out.stderr
    assert out.stdout == ""
