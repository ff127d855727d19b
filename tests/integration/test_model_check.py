"""The lifecycle check of a stage's Bedrock models: the weekly cron (alerts once per model and state)
and `aijobs models check` (its table and exit code), against a stubbed Bedrock (botocore Stubber)
and moto for the rest."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from rich.console import Console
from typer.testing import CliRunner, Result

from aijobs import aws, runtime
from aijobs.kinds.registry import require
from aijobs.provider_plan import plans_setting
from aijobs.providers.lifecycle import bedrock_models
from aijobs.scheduled.context import CronContext
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.registry import SCHEDULED_HANDLERS
from aijobs.settings import CronSettings
from aijobs_cdk.stage import load_stage_config
from aijobs_cli.commands import models as models_cli
from aijobs_cli.main import app
from tests.integration.harness import Stage
from tests.unit.test_model_lifecycle import add_lifecycle

pytestmark = pytest.mark.integration

WEEKLY = "0 6 * * 1"
# The stage below: summary (us.amazon.nova-lite-v1:0), classify (us.amazon.nova-micro-v1:0), and a
# stage still naming the models that reached their end of life: image-generate on Nova Canvas,
# video-generate on Nova Reel; no allowed or fallback models.
CANVAS, LITE, MICRO, REEL = (
    "amazon.nova-canvas-v1:0", "amazon.nova-lite-v1:0", "amazon.nova-micro-v1:0", "amazon.nova-reel-v1:0",
)  # fmt: skip


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {
        **stage_values,
        "PROVIDER": "bedrock",
        "QUEUE_NAMES": "summary;image-generate;video-generate",
        "CRONS": WEEKLY,
        "KIND_MODELS": f"image-generate={CANVAS};video-generate={REEL}",
        "KIND_ALLOWED_MODELS": "summary=none;image-generate=none",
        "KIND_FALLBACKS": "summary=none",
    }


@pytest.fixture
def bedrock() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("bedrock", region_name="us-east-1")
    with Stubber(client) as stub:
        yield client, stub


def _context(stage: Stage, client: Any) -> CronContext:
    """The cron dispatcher's collaborators, built from its environment as in Lambda."""
    ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)
    ctx.bedrock = lambda: client
    return ctx


def _week(stub: Stubber, answers: dict[str, str]) -> None:
    """One run's answers, in the order the check asks (the models sorted); ACTIVE unless named."""
    for model in (CANVAS, LITE, MICRO, REEL):
        add_lifecycle(stub, model, answers.get(model, "ACTIVE"))


def _run(ctx: CronContext, week: int) -> dict[str, Any]:
    event = {"cron": WEEKLY, "scheduledTime": f"2026-12-{week:02d}T06:00:00Z"}
    return dispatch(event, ctx, SCHEDULED_HANDLERS)


def _alerts(stage: Stage, inbox: str) -> list[dict[str, Any]]:
    return [json.loads(json.loads(m["Body"])["Message"]) for m in stage.receive(inbox)]


def test_the_weekly_check_alerts_once_per_model_and_state(stage: Stage, bedrock: tuple[Any, Stubber]) -> None:
    client, stub = bedrock
    inbox = stage.subscribe_inbox()
    ctx = _context(stage, client)
    # Week 1: the image and video models turned Legacy; time to migrate.
    _week(stub, {CANVAS: "LEGACY", REEL: "LEGACY"})
    first = _run(ctx, 7)
    assert first["status"] == "ok"
    assert first["result"]["alerted"] == [CANVAS, REEL]
    assert first["result"]["models"] == {
        f"{CANVAS}@us-east-1": "LEGACY", f"{LITE}@us-east-1": "ACTIVE",
        f"{MICRO}@us-east-1": "ACTIVE", f"{REEL}@us-east-1": "LEGACY",
    }  # fmt: skip
    canvas, reel = _alerts(stage, inbox)
    assert (canvas["model"], canvas["status"], canvas["kinds"]) == (CANVAS, "LEGACY", ["image-generate"])
    assert canvas["endOfLife"].startswith("2026-09-30")
    assert "aijobs models check" in canvas["fix"]
    assert reel["kinds"] == ["video-generate"]
    # Week 2: nothing new, nothing said (another run, on another container).
    _week(stub, {CANVAS: "LEGACY", REEL: "LEGACY"})
    assert _run(_context(stage, client), 14)["result"]["alerted"] == []
    assert _alerts(stage, inbox) == []
    # Week 3: the image model is gone. That is news; the still-Legacy video model is not.
    _week(stub, {CANVAS: "END_OF_LIFE", REEL: "LEGACY"})
    third = _run(ctx, 21)
    assert third["result"]["alerted"] == [CANVAS]
    (gone,) = _alerts(stage, inbox)
    assert (gone["model"], gone["status"]) == (CANVAS, "END_OF_LIFE")
    assert "reached the end of its life" in gone["error"]
    stub.assert_no_pending_responses()


def test_a_lifecycle_that_cannot_be_read_fails_the_run_after_checking_the_others(
    stage: Stage, bedrock: tuple[Any, Stubber]
) -> None:
    client, stub = bedrock
    inbox = stage.subscribe_inbox()
    _week(stub, {CANVAS: "DENIED", REEL: "LEGACY"})
    outcome = _run(_context(stage, client), 7)
    assert outcome["status"] == "failed"
    assert CANVAS in outcome["error"]
    stub.assert_no_pending_responses()  # every model was asked
    subjects = sorted(alert["subject"] for alert in _alerts(stage, inbox))
    # The Legacy model's alert, and the cron's incident (once, aijobs.store.cron_incidents).
    assert subjects == [f"aijobs dev: cron '{WEEKLY}' failing", f"aijobs dev: model {REEL} is LEGACY"]


class _DownAlerts:
    def publish(self, subject: str, detail: dict[str, Any]) -> None:
        raise RuntimeError("SNS is down")


def test_an_alert_that_could_not_be_sent_is_sent_next_week(
    stage: Stage, bedrock: tuple[Any, Stubber]
) -> None:
    client, stub = bedrock
    inbox = stage.subscribe_inbox()
    ctx = _context(stage, client)
    real, ctx.alerts = ctx.alerts, _DownAlerts()  # type: ignore[assignment]
    _week(stub, {REEL: "LEGACY"})
    with pytest.raises(RuntimeError, match="SNS is down"):  # the incident alert cannot go out either
        _run(ctx, 7)
    ctx.alerts = real
    _week(stub, {REEL: "LEGACY"})
    assert _run(ctx, 14)["result"]["alerted"] == [REEL]
    assert [a.get("model") for a in _alerts(stage, inbox) if "model" in a] == [REEL]


def test_a_stage_without_bedrock_models_calls_nothing(stage: Stage, bedrock: tuple[Any, Stubber]) -> None:
    client, _stub = bedrock
    ctx = _context(stage, client)
    ctx.plans = {}
    assert _run(ctx, 7)["result"]["models"] == {}  # the Stubber would refuse any call


# --- `aijobs models check` ---------------------------------------------------------------------------

# `.env.dev` as shipped: these, sorted, are what its kinds can call (summary's allow-list included).
# Every Bedrock model the shipped dev stage can call (defaults, allowed, fallbacks).
DEV_MODELS = tuple(bedrock_models(load_stage_config("dev").provider_plans))
DEV_IMAGE = require("image-generate").models["bedrock"] or ""
DEV_VIDEO = require("video-generate").models["bedrock"] or ""


class _Cli:
    """Runs `aijobs models check ARGS` against the stubbed Bedrock, recording the regions asked."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.regions: list[str] = []

    def bedrock(self, region: str) -> Any:
        self.regions.append(region)
        return self.client

    def __call__(self, *args: str) -> Result:
        return CliRunner().invoke(app, ["models", "check", *args])


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, bedrock: tuple[Any, Stubber]) -> _Cli:
    """With a console wide enough for the table's rows to stay on one line each."""
    runner = _Cli(bedrock[0])
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setattr(models_cli, "_bedrock", runner.bedrock)
    monkeypatch.setattr(models_cli, "out", Console(width=200, soft_wrap=True))
    return runner


def _table_rows(output: str) -> dict[str, list[str]]:
    """model -> its cells, from the printed table (cells cut at the header's column starts)."""
    lines = output.splitlines()
    header = next(line for line in lines if " model " in line and " kinds" in line)
    starts = [header.index(name) for name in models_cli.COLUMNS]
    found = {}
    for line in lines:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line)], strict=True)]
        if cells[0] in DEV_MODELS:
            found[cells[0]] = cells
    return found


def test_check_of_a_stage_whose_models_are_all_active_exits_zero(
    cli: _Cli, bedrock: tuple[Any, Stubber]
) -> None:
    _client, stub = bedrock
    for model in DEV_MODELS:
        add_lifecycle(stub, model, "ACTIVE")
    result = cli("--stage", "dev", "--region", "us-east-1")
    assert result.exit_code == 0, result.output
    assert cli.regions == ["us-east-1"]
    table = _table_rows(result.output)
    assert set(table) == set(DEV_MODELS)
    # A kind's default and its allow-list; a workflow (report) calls its child kind's models.
    assert table["amazon.nova-lite-v1:0"] == [
        "amazon.nova-lite-v1:0",
        "us-east-1",
        "ACTIVE",
        "",
        "",
        "report, summary",
    ]
    assert table["amazon.nova-pro-v1:0"][5] == "report, summary"
    assert table["amazon.nova-micro-v1:0"][5] == "classify"


def test_check_shows_a_legacy_and_a_gone_model_and_exits_non_zero(
    cli: _Cli, bedrock: tuple[Any, Stubber]
) -> None:
    _client, stub = bedrock
    answers = {DEV_IMAGE: "LEGACY", DEV_VIDEO: "END_OF_LIFE"}
    for model in DEV_MODELS:
        add_lifecycle(stub, model, answers.get(model, "ACTIVE"))
    result = cli("--stage", "dev", "--region", "us-east-1")
    assert result.exit_code == 1, result.output
    table = _table_rows(result.output)
    assert table[DEV_IMAGE] == [
        DEV_IMAGE, "us-east-1", "LEGACY", "2026-03-30", "2026-09-30", "image-batch, image-generate",
    ]  # fmt: skip
    assert table[DEV_VIDEO] == [DEV_VIDEO, "us-east-1", "END_OF_LIFE", "", "", "video-generate"]
    assert table["amazon.titan-embed-text-v2:0"][2] == "ACTIVE"
    assert "reached the end of its life" in result.output


def test_check_exits_two_when_a_lifecycle_cannot_be_read(cli: _Cli, bedrock: tuple[Any, Stubber]) -> None:
    _client, stub = bedrock
    for model in DEV_MODELS:
        add_lifecycle(stub, model, "DENIED" if model == "amazon.nova-pro-v1:0" else "ACTIVE")
    result = cli("--stage", "dev", "--region", "us-east-1", "--json")
    assert result.exit_code == 2, result.output
    statuses = {row["model"]: row["status"] for row in json.loads(result.output)["models"]}
    assert statuses["amazon.nova-pro-v1:0"] == "UNKNOWN"
    assert {status for model, status in statuses.items() if model != "amazon.nova-pro-v1:0"} == {"ACTIVE"}


def test_check_of_a_deployed_stack_reads_the_plan_it_runs_in_its_region(
    cli: _Cli, bedrock: tuple[Any, Stubber], stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stack's outputs name its cron dispatcher; its environment holds the deployed plan (here
    only the stage above's, not `.env.dev`'s)."""
    _client, stub = bedrock
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    role = boto3.client("iam").create_role(RoleName="cron", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return None\n")
    plans = stage.resources.config.provider_plans
    boto3.client("lambda").create_function(
        FunctionName="aijobs-dev-CronDispatcher-x1", Runtime="python3.12", Role=role,
        Handler="handler.handler", Code={"ZipFile": code.getvalue()},
        Environment={"Variables": plans_setting(plans)},
    )  # fmt: skip
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"CronDispatcherFunction": {"Value": "aijobs-dev-CronDispatcher-x1"}},
    }
    boto3.client("cloudformation").create_stack(StackName="aijobs-dev", TemplateBody=json.dumps(template))
    aws.reset_clients()
    for model in (CANVAS, LITE, MICRO, REEL):
        add_lifecycle(stub, model, "ACTIVE")
    result = cli("--stack", "aijobs-dev", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["regions"] == cli.regions == ["us-east-1"]  # the function's own region
    assert [(row["model"], row["kinds"]) for row in answer["models"]] == [
        (CANVAS, "image-generate"), (LITE, "summary"), (MICRO, "classify"), (REEL, "video-generate"),
    ]  # fmt: skip


def test_the_dev_stage_plan_is_what_the_check_reads() -> None:
    """The stage file the CLI tests read: if `.env.dev` changes its models, they say so here."""
    from aijobs.providers.lifecycle import bedrock_models

    assert tuple(bedrock_models(load_stage_config("dev").provider_plans)) == DEV_MODELS
