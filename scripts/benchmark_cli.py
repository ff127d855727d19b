"""Benchmark the CLI's start (issue 28): how long `aijobs --help`, `aijobs status --help` and
`aijobs status <id>` take, and what they import.

Prints figures and asserts nothing (machines here are shared and noisy; tests never time things):
for each command, the wall time of a fresh interpreter running it (best of --repeat), beside
`python -c pass` (the interpreter's own start), the number of modules it imported and which of
the heavy ones (boto3, botocore, pydantic, moto, rich, aws_lambda_powertools, aijobs.*) are among
them. `aijobs status <id>` asks a tiny stdlib HTTP server this script starts (a canned job), with
`--api-url URL --api-key KEY`, as against a deployed stage.

    .venv/bin/python scripts/benchmark_cli.py [--repeat 5] [--tree DIR ...]

`--tree DIR` measures the code of that checkout instead (repeatable: a copy of the code before a
change, e.g. `git archive HEAD~1 | tar -x -C /tmp/before`, beside `--tree .`, in one run).

The commands run as the `aijobs` console script does (`aijobs_cli.main:app`), on this process's
`sys.path` (PYTHONPATH) and environment. tests/unit/test_cli_imports.py holds what each may import.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HEAVY = ("boto3", "botocore", "pydantic", "moto", "rich", "aws_lambda_powertools")
JOB = {
    "jobId": "job-0001",
    "kind": "summarize",
    "status": "succeeded",
    "attempts": 1,
    "model": "anthropic.claude-3-haiku",
    "createdAt": "2026-12-03T06:00:00Z",
    "startedAt": "2026-12-03T06:00:01Z",
    "finishedAt": "2026-12-03T06:00:03Z",
    "result": {"summary": "Queues decouple accepting work from doing it."},
}
# Runs the CLI as its console script does, then writes the names in sys.modules to a file.
RUNNER = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["BENCH_MODULES"], "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "aijobs"
from aijobs_cli.main import app
app()
"""


class _JobHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({**JOB, "jobId": self.path.rsplit("/", 1)[-1]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def start_server() -> tuple[ThreadingHTTPServer, str]:
    """A stdlib HTTP server answering every GET with the canned job; its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _JobHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def tree_path(tree: Path | None) -> str:
    """The PYTHONPATH of a checkout (Lambda's layout and the CLI's), or this process's own."""
    if tree is None:
        return os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(str(tree / part) for part in ("layers/aijobs/python", "functions", "cli", "cdk"))


def run(code: str, args: list[str], modules_file: Path | None, tree: Path | None = None) -> float:
    """Wall seconds of one fresh interpreter running `code` with `args` (on `tree`'s code)."""
    env = dict(os.environ, BENCH_MODULES=str(modules_file or os.devnull), PYTHONPATH=tree_path(tree))
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed


def measure(name: str, args: list[str], repeat: int, tree: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        modules_file = Path(scratch) / "modules.json"
        best = min(run(RUNNER, args, modules_file, tree) for _ in range(repeat))
        modules = json.loads(modules_file.read_text())
    tops = {module.split(".")[0] for module in modules}
    return {
        "tree": str(tree or "PYTHONPATH"),
        "command": name,
        "best_s": best,
        "modules": len(modules),
        "heavy": [package for package in HEAVY if package in tops],
        "aijobs": sorted(module for module in modules if module.split(".")[0] in ("aijobs", "aijobs_cdk")),
        "aijobs_cli": sorted(module for module in modules if module.startswith("aijobs_cli.")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (the best is kept)")
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="measure the code of this checkout (repeatable, e.g. a copy of the code before a change "
        "beside this one); default: this process's PYTHONPATH",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    options = parser.parse_args()
    server, url = start_server()
    commands = [
        ("aijobs --help", ["--help"]),
        ("aijobs status --help", ["status", "--help"]),
        ("aijobs status <id>", ["status", "job-0001", "--api-url", url, "--api-key", "bench-key"]),
    ]
    try:
        floor = min(run("pass", [], None) for _ in range(options.repeat))
        rows = [
            measure(name, args, options.repeat, tree)
            for tree in options.tree or [None]
            for name, args in commands
        ]
    finally:
        server.shutdown()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if options.json:
        print(json.dumps({"python_pass_s": floor, "load": load, "commands": rows}, indent=2))
        return
    print(f"load average (1 min): {load:.2f} on {os.cpu_count()} cores" if load is not None else "")
    print(f"{'python -c pass':24} {floor * 1000:7.0f} ms  (best of {options.repeat})")
    for row in rows:
        if row is rows[0] or row["tree"] != rows[rows.index(row) - 1]["tree"]:
            print(f"code: {row['tree']}")
        print(
            f"{row['command']:24} {row['best_s'] * 1000:7.0f} ms  {row['modules']:4} modules  "
            f"heavy: {', '.join(row['heavy']) or '-'}"
        )
        counts = f"{len(row['aijobs'])}; aijobs_cli: {len(row['aijobs_cli'])}"
        print(f"{'':24} aijobs and aijobs_cdk modules: {counts}")
        if row["aijobs"]:
            more = " ..." if len(row["aijobs"]) > 12 else ""
            print(f"{'':24}   {', '.join(row['aijobs'][:12])}{more}")


if __name__ == "__main__":
    main()
