"""docs/how-to/add-a-kind.md, followed step by step in a temporary copy of the repository.

The page's marked blocks are the steps: the scaffold command, the worked `translate` module, the
requests, the synth commands. The test runs them as written (in a copy, so the repository is left
alone), then runs the kind contract suite in the copy: a new kind needs no test edited.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aijobs_cdk import REPO_ROOT

pytestmark = pytest.mark.integration

PAGE = REPO_ROOT / "docs" / "how-to" / "add-a-kind.md"
_BLOCK = re.compile(
    r"<!-- howto:(?P<step>[a-z-]+)(?: (?P<arg>\S+))? -->\n```\w*\n(?P<body>.*?)```", re.DOTALL
)
# What a fresh clone of the repository has (the work tree less what git ignores), plus the tools a
# fresh clone would install first (`make bootstrap`): shared, not copied.
_SHARED = (".venv", "node_modules", ".cache")

RUN_ONE_JOB = """
import json, sys, time
from pathlib import Path
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack

good, bad, folder = json.loads(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
with running_local_stack(folder) as stack:
    client = Target.from_info_file(stack.info_file)
    refused = client.request("POST", "/jobs", bad)
    accepted = client.request("POST", "/jobs", good)
    assert accepted.status == 202, accepted.body
    job_id = accepted.body["jobId"]
    deadline = time.monotonic() + 60
    job = client.request("GET", f"/jobs/{job_id}").body
    while job["status"] not in ("succeeded", "failed_final") and time.monotonic() < deadline:
        time.sleep(0.2)
        job = client.request("GET", f"/jobs/{job_id}").body
(folder / "outcome.json").write_text(json.dumps({"refused": [refused.status, refused.body], "job": job}))
"""


def _steps() -> dict[str, tuple[str | None, str]]:
    steps = {match["step"]: (match["arg"], match["body"]) for match in _BLOCK.finditer(PAGE.read_text())}
    assert {"scaffold", "module", "request", "bad-request", "synth"} <= set(steps), sorted(steps)
    return steps


def _copy_of_the_repository(target: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    for name in _SHARED:
        if (REPO_ROOT / name).exists():
            (target / name).symlink_to(REPO_ROOT / name)
    return target


def _env(copy: Path) -> dict[str, str]:
    paths = [copy / "functions", copy / "layers/aijobs/python", copy / "cdk", copy / "cli", copy]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTEST_", "COV_"))}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(str(path) for path in paths),
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            "AWS_EC2_METADATA_DISABLED": "true",
            "PIP_NO_INDEX": "1",
        }
    )
    return env


def _run(command: list[str], copy: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command, cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-4000:])
    return result


def _commands(body: str) -> list[list[str]]:
    """The console block's commands, `aijobs` run as the copy's CLI module."""
    commands = []
    for line in body.strip().splitlines():
        words = shlex.split(line)
        if words[0] == "aijobs":
            words = [sys.executable, "-m", "aijobs_cli.main", *words[1:]]
        commands.append(words)
    return commands


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_of_the_repository(tmp_path_factory.mktemp("fork"))


def test_the_how_to_holds_step_by_step_in_a_copy_of_the_repository(copy: Path, tmp_path: Path) -> None:
    steps = _steps()
    before = {path: path.read_text() for path in copy.glob(".env.*")}

    # 1. Scaffold: one new module, one changed line per stage file, nothing else.
    for command in _commands(steps["scaffold"][1]):
        _run(command, copy)
    module = copy / "layers/aijobs/python/aijobs/kinds/translate.py"
    assert module.is_file()
    for path, text in before.items():
        changed = [
            (a, b) for a, b in zip(text.splitlines(), path.read_text().splitlines(), strict=True) if a != b
        ]
        assert len(changed) == 1, (path.name, changed)
        assert changed[0][1].startswith("QUEUE_NAMES=")
        assert changed[0][1].endswith(";translate")

    # 2. The worked example replaces the scaffold.
    name, source = steps["module"]
    assert name == "translate"
    module.write_text(source)

    # 3. One job on a local stack: the good request succeeds with a valid output, the bad one is a 422.
    good, bad = json.loads(steps["request"][1]), json.loads(steps["bad-request"][1])
    _run([sys.executable, "-c", RUN_ONE_JOB, json.dumps(good), json.dumps(bad), str(tmp_path)], copy)
    outcome: dict[str, Any] = json.loads((tmp_path / "outcome.json").read_text())
    job = outcome["job"]
    assert job["status"] == "succeeded", job
    assert set(job["result"]) == {"translation", "source"}
    assert job["model"] == "local-text-1"
    status, body = outcome["refused"]
    assert (status, body["code"]) == (422, "invalid_options"), body

    # 4. Synth for dev and prod, with no credentials, as the page says.
    for command in _commands(steps["synth"][1]):
        out = tmp_path / "cdk.out"
        _run([*command, "--no-notices", "-q", "-o", str(out)], copy)
        stage = "prod" if "stage=prod" in command else "dev"
        template = json.loads((out / f"aijobs-{stage}.template.json").read_text())
        functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
        consumers = {r["Properties"]["Environment"]["Variables"].get("QUEUE_NAME"): r for r in functions}
        assert "translate" in consumers, (stage, sorted(map(str, consumers)))
        # The worked example's Tuning: its consumer's timeout and retries, nobody else's.
        translate = consumers["translate"]["Properties"]
        assert (translate["Timeout"], translate["Environment"]["Variables"]["MAX_RETRIES"]) == (120, "1")
        assert consumers["summary"]["Properties"]["Timeout"] == 60

    # 5. The test suite's contract covers the new kind without an edit.
    contract = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "translate",
         "tests/integration/test_kind_contract.py"],
        copy, timeout=600,
    )  # fmt: skip
    assert re.search(r"\b5 passed", contract.stdout), contract.stdout[-2000:]
    _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_stage_files.py"],
        copy,
    )
