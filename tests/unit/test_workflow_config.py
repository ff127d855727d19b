"""Workflow kinds in the stage configuration: child kinds required, plans inherited, queues linked."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from dotenv import dotenv_values

from aijobs.bindings import KIND_LIMITS, binding_name, parse_limits
from aijobs.kinds.registry import require
from aijobs.provider_plan import KindPlan, ProviderPlanError, plans_from_setting
from aijobs.settings import ConsumerSettings, DlqSettings
from aijobs.workflows.registry import workflow_children
from aijobs_cdk.provider_plans import parse_provider_plan
from aijobs_cdk.stage_config import (
    ConfigError,
    StageConfig,
    dead_letter_queues_env,
    parse_stage_config,
    split_list,
)
from aijobs_cli.local.resources import StageResources

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = {"report": "summary", "embedding-batch": "embedding", "image-batch": "image-generate"}
CHILD_KINDS = "summary;embedding;image-generate"
ALL_KINDS = f"image-generate;tts-generate;video-generate;{CHILD_KINDS};report;embedding-batch;image-batch"
PLAN_KEYS = ("KIND_PROVIDERS", "KIND_MODELS", "KIND_ALLOWED_MODELS")


def _config(stage: str = "dev", **values: str) -> StageConfig:
    return parse_stage_config(stage, {"QUEUE_NAMES": ALL_KINDS, **values})


def _consumer_env(config: StageConfig, kind: str, **urls: str) -> dict[str, str]:
    """A consumer environment as the stacks build it, with the given `Q_*` URLs."""
    return {
        "STAGE": config.stage,
        "META_TABLE_NAME": "meta",
        "SHARD_TABLE_NAMES": "shard-0",
        "WEBHOOK_QUEUE_URL": "https://sqs.example/webhooks",
        **config.table_settings_env(),
        "ALERT_TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:alerts",
        "BUCKET_NAME": "bucket",
        "QUEUE_NAME": kind,
        "QUEUE_URL": f"https://sqs.example/{kind}",
        "DLQ_URL": f"https://sqs.example/{kind}-dlq",
        **config.consumer_settings_env(kind),
        **urls,
    }


def _dlq_env(config: StageConfig, **urls: str) -> dict[str, str]:
    return {
        "STAGE": config.stage,
        "META_TABLE_NAME": "meta",
        "SHARD_TABLE_NAMES": "shard-0",
        "WEBHOOK_QUEUE_URL": "https://sqs.example/webhooks",
        **config.table_settings_env(),
        "ALERT_TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:alerts",
        "QUEUE_NAMES": ";".join(config.queue_names),
        **config.dlq_settings_env(),
        **dead_letter_queues_env({kind: f"{kind}-dlq" for kind in config.queue_names}),
        **urls,
    }


def test_the_registry_ships_three_workflows_over_shipped_kinds() -> None:
    assert workflow_children() == WORKFLOWS


# --- child kinds are required ---------------------------------------------------------------------


@pytest.mark.parametrize(("workflow", "child"), sorted(WORKFLOWS.items()))
def test_a_workflow_without_its_child_kind_is_a_config_error_naming_the_child(
    workflow: str, child: str
) -> None:
    others = ";".join(kind for kind in WORKFLOWS.values() if kind != child)
    message = f"QUEUE_NAMES: workflow {workflow!r} runs its parts as {child!r}; add {child!r} too"
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_stage_config("dev", {"QUEUE_NAMES": f"{others};{workflow}"})


def test_a_workflow_may_be_listed_before_its_child_kind() -> None:
    config = parse_stage_config("dev", {"QUEUE_NAMES": "report;summary"})
    assert config.queue_names == ("report", "summary")
    assert config.workflow_children == {"report": "summary"}


def test_workflow_children_lists_only_the_configured_workflows() -> None:
    assert _config().workflow_children == WORKFLOWS
    assert parse_stage_config("dev", {"QUEUE_NAMES": CHILD_KINDS}).workflow_children == {}
    partial = parse_stage_config("dev", {"QUEUE_NAMES": "summary;embedding;embedding-batch"})
    assert partial.workflow_children == {"embedding-batch": "embedding"}


@pytest.mark.parametrize("stage", ["dev", "prod", "local"])
def test_shipped_stages_configure_every_workflow_with_its_child_kind(stage: str) -> None:
    config = parse_stage_config(stage, dotenv_values(REPO_ROOT / f".env.{stage}"))
    assert config.workflow_children == WORKFLOWS


# --- provider plans ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", PLAN_KEYS)
@pytest.mark.parametrize(("workflow", "child"), sorted(WORKFLOWS.items()))
def test_naming_a_workflow_in_a_plan_key_is_a_provider_plan_error(
    key: str, workflow: str, child: str
) -> None:
    entry = "bedrock" if key == "KIND_PROVIDERS" else "amazon.nova-pro-v1:0"
    arguments: dict[str, Any] = {key.lower(): f"{workflow}={entry}"}
    with pytest.raises(ProviderPlanError, match=re.escape(f"{key}: [{workflow!r}] are workflows")) as caught:
        parse_provider_plan(
            stage="dev",
            kinds=tuple(split_list(ALL_KINDS)),
            default_provider=None,
            inherit=WORKFLOWS,
            **arguments,
        )
    assert f"{workflow} -> {child}" in str(caught.value)


def test_a_workflow_in_kind_models_fails_the_stage_config() -> None:
    with pytest.raises(ConfigError, match=re.escape("KIND_MODELS: ['report'] are workflows")):
        _config(KIND_MODELS="summary=amazon.nova-lite-v1:0;report=amazon.nova-pro-v1:0")


def test_a_workflow_inherits_its_child_kinds_provider_model_and_allowed_models() -> None:
    config = _config(
        KIND_PROVIDERS="summary=openai",
        KIND_MODELS="summary=gpt-4o",
        KIND_ALLOWED_MODELS="summary=gpt-4.1-mini,gpt-4o-mini",
        OPENAI_SECRET_NAME="aijobs/openai",
    )
    assert config.plan("report") == KindPlan("report", "openai", "gpt-4o", ("gpt-4.1-mini", "gpt-4o-mini"))
    assert config.plan("summary") == KindPlan("summary", "openai", "gpt-4o", ("gpt-4.1-mini", "gpt-4o-mini"))
    # The report consumer runs on that provider, and reads back that plan.
    env = config.consumer_settings_env("report")
    assert env["PROVIDER"] == "openai"
    assert plans_from_setting(env)["report"] == config.plan("report")


def test_workflows_inherit_their_child_kinds_defaults() -> None:
    config = _config()
    for workflow, child in WORKFLOWS.items():
        inherited, own = config.plan(workflow), config.plan(child)
        assert (inherited.kind, inherited.provider, inherited.model, inherited.allowed_models) == (
            workflow,
            own.provider,
            own.model,
            own.allowed_models,
        )
    assert config.plan("embedding-batch").model == "amazon.titan-embed-text-v2:0"
    assert config.plan("image-batch").model == require("image-generate").models["bedrock"]
    assert config.plan("report").model == "us.amazon.nova-lite-v1:0"
    assert {config.plan(workflow).provider for workflow in WORKFLOWS} == {"bedrock"}
    assert {parse_stage_config("local", {"QUEUE_NAMES": ALL_KINDS}).plan("report").provider} == {"local"}


def test_plans_keep_the_order_of_queue_names() -> None:
    config = parse_stage_config("dev", {"QUEUE_NAMES": "report;summary;tts-generate"})
    assert [plan.kind for plan in config.provider_plans] == ["report", "summary", "tts-generate", "classify"]


def test_inherit_ignores_workflows_that_are_not_configured() -> None:
    plans = parse_provider_plan(stage="dev", kinds=("summary",), default_provider=None, inherit=WORKFLOWS)
    assert [plan.kind for plan in plans] == ["summary", "classify"]


def test_inheriting_from_an_unconfigured_child_kind_is_a_provider_plan_error() -> None:
    with pytest.raises(ProviderPlanError, match="workflow 'report' runs its parts as 'summary'"):
        parse_provider_plan(stage="dev", kinds=("report",), default_provider=None, inherit=WORKFLOWS)


def test_without_inherit_a_workflow_kind_is_a_kind_of_your_own() -> None:
    # The contrast that makes the inheritance tests meaningful: no child plan, no model.
    plans = parse_provider_plan(stage="dev", kinds=("summary", "report"), default_provider=None)
    assert {plan.kind: plan.model for plan in plans}["report"] is None


# --- linked queues -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "linked"),
    [
        ("report", ("summary",)),
        ("embedding-batch", ("embedding",)),
        ("image-batch", ("image-generate",)),
        ("summary", ("report",)),
        ("embedding", ("embedding-batch",)),
        ("image-generate", ("image-batch",)),
        ("tts-generate", ()),
        ("video-generate", ()),
    ],
)
def test_linked_queues_of_parent_child_and_unrelated_kinds(kind: str, linked: tuple[str, ...]) -> None:
    config = _config()
    assert config.linked_queues(kind) == linked
    assert config.consumer_settings_env(kind)["LINKED_QUEUES"] == ";".join(linked)


def test_a_child_kind_without_its_workflow_links_nothing() -> None:
    config = parse_stage_config("dev", {"QUEUE_NAMES": CHILD_KINDS})
    assert {kind: config.linked_queues(kind) for kind in config.queue_names} == {
        "summary": (),
        "embedding": (),
        "image-generate": (),
    }


def test_consumer_env_carries_the_stuck_queued_threshold() -> None:
    assert _config().consumer_settings_env("report")["STUCK_QUEUED_SECONDS"] == "900"
    assert _config(STUCK_QUEUED_SECONDS="120").consumer_settings_env("tts-generate")[
        "STUCK_QUEUED_SECONDS"
    ] == ("120")


def test_dlq_env_gives_every_kind_its_attempt_budget_and_links_nothing() -> None:
    """The DLQ consumer sends to every kind's queue (QUEUE_NAMES, as the API and the cron), so it
    needs no LINKED_QUEUES; a spent budget, the kind's own, is what finalizes a job."""
    config = _config(MAX_RETRIES="2")
    env = config.dlq_settings_env()
    assert "LINKED_QUEUES" not in env
    assert {
        kind: limits.attempts for kind, limits in parse_limits(env[KIND_LIMITS]).items()
    } == dict.fromkeys(config.queue_names, 3)


# --- settings models -----------------------------------------------------------------------------


def test_consumer_settings_read_one_url_per_linked_queue() -> None:
    config = _config(STUCK_QUEUED_SECONDS="300")
    settings = ConsumerSettings.from_env(
        _consumer_env(config, "report", Q_SUMMARY="https://sqs.example/summary")
    )
    assert settings.linked_queue_urls == {"summary": "https://sqs.example/summary"}
    assert settings.stuck_queued_seconds == 300
    unrelated = ConsumerSettings.from_env(_consumer_env(config, "tts-generate", Q_SUMMARY="ignored"))
    assert unrelated.linked_queue_urls == {}


@pytest.mark.parametrize(("kind", "binding"), [("report", "Q_SUMMARY"), ("summary", "Q_REPORT")])
@pytest.mark.parametrize("url", [None, ""])
def test_consumer_settings_refuse_a_missing_linked_queue_url(
    kind: str, binding: str, url: str | None
) -> None:
    env = _consumer_env(_config(), kind)
    if url is not None:
        env[binding] = url
    with pytest.raises(
        ValueError, match=re.escape(f"queue URL variables missing for LINKED_QUEUES: ['{binding}']")
    ):
        ConsumerSettings.from_env(env)


def test_consumer_settings_need_the_stuck_queued_threshold() -> None:
    env = _consumer_env(_config(), "tts-generate")
    del env["STUCK_QUEUED_SECONDS"]
    with pytest.raises(ValueError, match="STUCK_QUEUED_SECONDS"):
        ConsumerSettings.from_env(env)


def test_dlq_settings_read_every_kinds_queue_and_budget_and_refuse_a_missing_one() -> None:
    config = _config()
    urls = {binding_name(kind): f"u-{kind}" for kind in config.queue_names}
    settings = DlqSettings.from_env(_dlq_env(config, **urls))
    assert settings.queue_urls == {kind: f"u-{kind}" for kind in config.queue_names}
    assert set(settings.kind_limits) == set(config.queue_names)
    without = {key: value for key, value in urls.items() if key != "Q_EMBEDDING_BATCH"}
    with pytest.raises(ValueError, match=re.escape("['Q_EMBEDDING_BATCH']")):
        DlqSettings.from_env(_dlq_env(config, **without))
    env = _dlq_env(config, **urls)
    with pytest.raises(ValueError, match=KIND_LIMITS):
        DlqSettings.from_env({key: value for key, value in env.items() if key != KIND_LIMITS})
    fewer = parse_stage_config("dev", {"QUEUE_NAMES": "summary;report"})
    missing = "['embedding', 'embedding-batch'"
    with pytest.raises(ValueError, match=re.escape(f"{KIND_LIMITS} has no attempt budget for {missing}")):
        DlqSettings.from_env({**env, KIND_LIMITS: fewer.kind_limits_setting})
    with pytest.raises(ValueError, match=re.escape("QUEUE_NAMES does not name the queues of ['embedding']")):
        DlqSettings.from_env(
            {**env, "QUEUE_NAMES": ";".join(k for k in config.queue_names if k != "embedding")}
        )


# --- the local stack's environments --------------------------------------------------------------


def _local_resources() -> StageResources:
    config = parse_stage_config("local", {"QUEUE_NAMES": ALL_KINDS})
    return StageResources(
        config=config,
        region="us-east-1",
        meta_table="meta",
        shard_tables=["shard-0"],
        bucket="bucket",
        topic_arn="arn:aws:sns:us-east-1:000000000000:alerts",
        queue_urls={kind: f"http://sqs.local/{kind}" for kind in config.queue_names},
        dlq_urls={kind: f"http://sqs.local/{kind}-dlq" for kind in config.queue_names},
        webhook_queue_url="http://sqs.local/webhooks",
    )


def test_local_consumer_env_gives_each_consumer_its_linked_queue_urls() -> None:
    resources = _local_resources()
    report = resources.consumer_env("report")
    assert report["LINKED_QUEUES"] == "summary"
    assert report["Q_SUMMARY"] == "http://sqs.local/summary"
    summary = resources.consumer_env("summary")
    assert summary["LINKED_QUEUES"] == "report"
    assert summary["Q_REPORT"] == "http://sqs.local/report"
    tts = resources.consumer_env("tts-generate")
    assert tts["LINKED_QUEUES"] == ""
    assert [key for key in tts if key.startswith("Q_")] == []
    assert ConsumerSettings.from_env(report).linked_queue_urls == {"summary": "http://sqs.local/summary"}


def test_local_dlq_env_gives_the_dlq_consumer_every_kinds_queue_url_and_budget() -> None:
    resources = _local_resources()
    env = resources.dlq_env()
    kinds = resources.config.queue_names
    assert {key: value for key, value in env.items() if key.startswith("Q_")} == {
        binding_name(kind): f"http://sqs.local/{kind}" for kind in kinds
    }
    settings = DlqSettings.from_env(env)
    assert settings.queue_urls == {kind: f"http://sqs.local/{kind}" for kind in kinds}
    assert set(settings.kind_limits) == set(kinds)


def test_a_function_without_linked_queues_fails_at_cold_start() -> None:
    """LINKED_QUEUES may be empty, never missing: a missing one means a miswired stack."""
    env = _consumer_env(_config(), "tts-generate")
    assert ConsumerSettings.from_env({**env, "LINKED_QUEUES": ""}).linked_queue_urls == {}
    del env["LINKED_QUEUES"]
    with pytest.raises(ValueError, match="LINKED_QUEUES is missing"):
        ConsumerSettings.from_env(env)


def test_the_dlq_consumer_maps_its_queues_to_kinds_from_its_environment() -> None:
    """Production queue names are generated: the kind of a DLQ is given, never parsed from it."""
    env = {
        "STAGE": "prod", "META_TABLE_NAME": "m", "SHARD_TABLE_NAMES": "s", "ALERT_TOPIC_ARN": "arn:t",
        "WEBHOOK_QUEUE_URL": "https://sqs.example/webhooks", "INDEX_BUCKETS": "8", "INDEX_BUCKETS_READ": "8",
        "QUEUE_NAMES": "summary;tts-generate", "Q_SUMMARY": "u-summary", "Q_TTS_GENERATE": "u-tts",
        KIND_LIMITS: "summary=attempts:4,lease:90,ceiling:1000;tts-generate=attempts:4,lease:90,ceiling:1000",
    }  # fmt: skip
    names = {"summary": "aijobs-prod-QueuesummaryDlq1A2B-x1", "tts-generate": "aijobs-prod-QueuettsDlq3C-y2"}
    settings = DlqSettings.from_env({**env, **dead_letter_queues_env(names)})
    assert settings.dead_letter_kinds == {name: kind for kind, name in names.items()}
    with pytest.raises(ValueError, match="DEAD_LETTER_QUEUES"):
        DlqSettings.from_env(env)  # missing: a miswired stack fails at cold start
    with pytest.raises(ValueError, match="DEAD_LETTER_QUEUES: 'summary' must be <kind>=<value>"):
        DlqSettings.from_env({**env, "DEAD_LETTER_QUEUES": "summary"})
    with pytest.raises(ValueError, match="DEAD_LETTER_QUEUES: kind 'summary' is listed twice"):
        DlqSettings.from_env({**env, "DEAD_LETTER_QUEUES": "summary=a-dlq;summary=b-dlq"})
