"""The CLI starts fast: `aijobs --help` and `aijobs status <id>` (through the HTTP API) import only
what they need, each command's heavy dependencies being imported when it runs (issue 28). Checked
in a fresh interpreter, since one test process has every module loaded already; timing lives in
scripts/benchmark_cli.py, never in a test."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# pyproject's pytest `pythonpath`, as the console script finds the packages.
PATHS = [str(ROOT / part) for part in ("functions", "layers/aijobs/python", "cdk", "cli")]
# Never for `--help`: AWS's SDK, moto, powertools, and the CLI's local stack, sizing and soak.
NEVER_FOR_HELP = (
    "boto3",
    "botocore",
    "moto",
    "aws_lambda_powertools",
    "aijobs_cli.local",
    "aijobs_cli.sizing",
    "aijobs_cli.soak",
)
# Never for a job command through the HTTP API.
NEVER_FOR_STATUS = ("boto3", "moto", "aijobs_cli.local", "aijobs_cli.sizing", "aijobs_cli.soak")
JOB = {"jobId": "job-1", "kind": "summarize", "status": "succeeded", "attempts": 1, "result": {"ok": 1}}
# Runs the CLI as its console script does; prints the modules it imported to stderr, last.
PROBE = """
import atexit, json, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv[0] = "aijobs"
from aijobs_cli.main import app
app()
"""


def _imported_by(*args: str) -> tuple[set[str], str]:
    """The modules `aijobs ARGS` imported in a fresh interpreter, and what it printed."""
    result = subprocess.run(
        [sys.executable, "-c", f"import sys\nsys.path[:0] = {PATHS!r}\n{PROBE}", *args],
        capture_output=True, text=True, check=False, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1", "COLUMNS": "100"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stderr.splitlines() if line.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES "))), result.stdout


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in names))


class _Api(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({**JOB, "jobId": self.path.rsplit("/", 1)[-1]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api_url() -> Iterator[str]:
    """A stdlib HTTP server answering every GET with a finished job, as a deployed API would."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_help_imports_neither_aws_nor_the_local_stack_nor_sizing() -> None:
    modules, printed = _imported_by("--help")
    assert "status" in printed
    assert "submit" in printed
    assert "aijobs_cli.main" in modules
    assert _loaded(modules, NEVER_FOR_HELP) == []


def test_building_every_command_imports_neither_aws_nor_the_local_stack() -> None:
    # typer builds each command's parameters (subcommands included) when asked for the click group.
    code = "import typer.main\nfrom aijobs_cli.main import app\ntyper.main.get_command(app)\n"
    probe = f"import sys, json\nsys.path[:0] = {PATHS!r}\n{code}print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"},
    )  # fmt: skip
    assert _loaded(set(json.loads(result.stdout)), NEVER_FOR_HELP) == []


def test_status_through_the_api_imports_neither_boto3_nor_moto(api_url: str) -> None:
    modules, printed = _imported_by("status", "job-7", "--api-url", api_url, "--api-key", "k")
    assert "job-7" in printed
    assert "succeeded" in printed
    assert _loaded(modules, NEVER_FOR_STATUS) == []
