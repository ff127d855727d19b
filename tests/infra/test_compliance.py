"""Deployment contract: cdk-nag, cfn-lint, outputs, config errors at synth, the CDK CLI itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import aws_cdk as cdk
import pytest
from cfnlint.api import lint_all

from aijobs_cdk import REPO_ROOT
from aijobs_cdk.app_factory import build_app
from aijobs_cdk.stage_config import ConfigError
from tests.infra.template import Synth

pytestmark = pytest.mark.infra


@pytest.mark.parametrize("fixture", ["dev", "prod", "capped", "single_consumer"])
def test_cdk_nag_reports_no_unacknowledged_finding(fixture: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    violations = [
        (violation["ruleName"], [r["constructPath"] for r in violation["violatingResources"]])
        for plugin in report["pluginReports"]
        for violation in plugin.get("violations", [])
    ]
    assert violations == []


def test_every_acknowledgement_names_a_rule_and_gives_a_reason(dev: Synth) -> None:
    acknowledged: list[tuple[str, str]] = []
    for construct in dev.app.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                acknowledged.extend(entry.data.items())
    assert acknowledged, "expected the documented acknowledgements (X-Ray, grant wildcards, DLQ, ...)"
    for rule, reason in acknowledged:
        assert rule.startswith("AwsSolutions::AwsSolutions-"), rule
        assert len(reason.strip()) >= 20, (rule, reason)


def test_cdk_nag_actually_fails_an_unacknowledged_finding(tmp_path: Path) -> None:
    """Guards the test above: a stack with a known finding must show up in the report."""
    from aws_cdk import aws_sqs as sqs
    from cdk_nag import AwsSolutionsChecks

    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Probe")
    sqs.Queue(stack, "NoDlqNoTls")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(RuntimeError):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {v["ruleName"] for p in report["pluginReports"] for v in p.get("violations", [])}
    assert any("SQS3" in rule for rule in rules), rules


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_cfn_lint_finds_no_errors(fixture: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    matches = lint_all(json.dumps(synth.json))
    errors = [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")]
    assert errors == []


def test_stack_outputs_cover_api_queues_tables_bucket_and_alerts(dev: Synth) -> None:
    outputs = set(dev.json["Outputs"])
    assert {"ApiUrl", "MetaTableName", "ShardTableNames", "BucketName", "AlertTopicArn"} <= outputs
    for binding in dev.config.bindings.values():
        assert f"QueueUrl{binding.replace('_', '')}" in outputs
        assert f"DlqUrl{binding.replace('_', '')}" in outputs


def _unregistered_kind() -> str:
    """A valid queue name no handler is registered for (a team may register any name it likes)."""
    from aijobs.consumer.registry import QUEUE_HANDLERS

    return next(name for n in range(100) if (name := f"unregistered{n}") not in QUEUE_HANDLERS)


def _unregistered_cron() -> str:
    """A valid 5-field expression no scheduled handler is registered under."""
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    return next(text for n in range(60) if (text := f"{n} 3 * * MON-FRI") not in SCHEDULED_HANDLERS)


UNREGISTERED_KIND, UNREGISTERED_CRON = _unregistered_kind(), _unregistered_cron()


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"QUEUE_NAMES": "summary;Image_Gen"}, "'Image_Gen'"),
        (
            {"QUEUE_NAMES": f"summary;{UNREGISTERED_KIND}", "KIND_PRICES": ""},
            rf"\['{UNREGISTERED_KIND}'\] are neither declared kinds",
        ),
        (
            {"CRONS": f"*/10 * * * *;{UNREGISTERED_CRON}"},
            rf"CRONS \['{re.escape(UNREGISTERED_CRON)}'\] have no handler",
        ),
        ({"QUEUE_NAMES": "x" * 70, "KIND_PRICES": ""}, "too long"),
        ({"CRONS": "*/10 * * * *;0 0 1 * 1"}, "0 0 1 \\* 1"),
        ({"CRONS": "*/61 * * * *"}, "CRONS"),
        ({"QUEUE_MAX_CONCURRENCY": "0"}, "QUEUE_MAX_CONCURRENCY"),
        ({"stage": "staging"}, "no configuration file .env.staging"),
    ],
)
def test_invalid_configuration_fails_synth_naming_the_entry(context: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_app(context)


@pytest.mark.skipif(shutil.which("npx") is None, reason="node/npx is not installed")
def test_cdk_cli_synthesizes_without_credentials_or_network(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AWS_") and key not in {"CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION"}
    }
    env.update(
        {
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            # Any attempt to reach AWS would fail fast instead of finding real credentials.
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
            # No package index either: the dependency layer comes from the cache the session built.
            "PIP_NO_INDEX": "1",
        }
    )
    result = subprocess.run(
        ["npx", "--no-install", "cdk", "synth", "--no-notices", "-q", "-o", str(tmp_path / "cdk.out")],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    template = json.loads((tmp_path / "cdk.out" / "aijobs-dev.template.json").read_text())
    assert "ApiUrl" in template["Outputs"]
