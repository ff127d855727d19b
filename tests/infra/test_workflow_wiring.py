"""Workflow kinds on the synthesized stack: linked queue URLs, send rights and inherited model access.

A workflow's consumer sends its children to the child kind's queue; the child kind's consumer
queues the parent's merge step. Each of them gets exactly those queues: one `Q_*` URL each, named in
`LINKED_QUEUES`, and `sqs:SendMessage` on them. The DLQ consumer (a dead last child queues its
parent's merge; a job SQS redrove with attempts left goes back to its own queue) gets every kind's
queue, as the API and the cron do: `QUEUE_NAMES` and one `Q_*` URL each.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Template

from aijobs.settings import (
    ApiSettings,
    ConsumerSettings,
    CronSettings,
    DlqSettings,
    FunctionSettings,
    WebhookSettings,
)
from aijobs_cdk.app_factory import build_app
from aijobs_cdk.stage_config import binding_name, queue_resource_name, split_list
from tests.infra.alarm_reader import queue_id
from tests.infra.template import Synth, cli_context, role_statements, symbolic_environment, target_id

pytestmark = pytest.mark.infra

CONSUMER = "queue_consumer.handler.handler"
DLQ_CONSUMER = "dlq_consumer.handler.handler"
SETTINGS_BY_HANDLER: dict[str, type[FunctionSettings]] = {
    "api.handler.handler": ApiSettings,
    CONSUMER: ConsumerSettings,
    DLQ_CONSUMER: DlqSettings,
    "cron_dispatcher.handler.handler": CronSettings,
    "webhook_consumer.handler.handler": WebhookSettings,
}
ALL_FIXTURES = ["dev", "prod", "capped", "single_consumer", "openai_children"]


def _workflows(kinds: tuple[str, ...]) -> dict[str, str]:
    """The configured workflow kinds and their child kinds, read from the workflow registry."""
    from aijobs.workflows.registry import WORKFLOWS, workflow

    found = {}
    for kind in kinds:
        if kind in WORKFLOWS and (definition := workflow(kind)) is not None:
            found[kind] = definition.child_kind
    return found


def _expected_links(kinds: tuple[str, ...]) -> dict[str, set[str]]:
    """What each consumer must be able to send to besides its own queue and DLQ: a workflow its
    child kind, a child kind every configured workflow whose parts it runs; any other kind nothing."""
    children = _workflows(kinds)
    return {
        kind: ({children[kind]} if kind in children else set())
        | {parent for parent, child in children.items() if child == kind}
        for kind in kinds
    }


@pytest.fixture(scope="module")
def openai_children(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """Two workflows only; embedding (so embedding-batch) on OpenAI, summary on a non-default model."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack, config = build_app(
        cli_context(
            {
                "QUEUE_NAMES": "summary;report;embedding;embedding-batch",
                "CRONS": "",
                "KIND_PRICES": "",
                "KIND_PROVIDERS": "embedding=openai",
                "OPENAI_SECRET_NAME": "aijobs/openai-key",
                "KIND_MODELS": "summary=amazon.nova-pro-v1:0",
                "KIND_ALLOWED_MODELS": "summary=amazon.nova-micro-v1:0",
            }
        ),
        outdir=str(outdir),
    )
    template_json = app.synth().get_stack_by_name(stack.stack_name).template
    return Synth(app, stack, config, Template.from_json(template_json), template_json, outdir)


# --- readers -------------------------------------------------------------------------------------


def _consumer(synth: Synth, kind: str) -> str:
    (function_id,) = [
        logical_id
        for logical_id, props in synth.functions_by_handler(CONSUMER).items()
        if props["Environment"]["Variables"]["QUEUE_NAME"] == kind
    ]
    return function_id


def _dlq_consumer(synth: Synth) -> str:
    (function_id,) = synth.functions_by_handler(DLQ_CONSUMER)
    return function_id


def _queue(synth: Synth, kind: str, suffix: str = "") -> str:
    """The logical id of a kind's main queue (or, with suffix `-dlq`, its DLQ)."""
    return queue_id(synth, queue_resource_name(synth.config.stage, kind) + suffix)


def _env(synth: Synth, function_id: str) -> dict[str, Any]:
    variables: dict[str, Any] = synth.props(function_id)["Environment"]["Variables"]
    return variables


def _queue_bindings(env: dict[str, Any]) -> set[str]:
    return {key for key in env if key.startswith("Q_")}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _send_targets(synth: Synth, function_id: str) -> set[str]:
    """Logical ids of the job queues a function's role may sqs:SendMessage to (a raw string stays as
    is, so a wildcard would show up and fail the comparison). The webhook delivery queue, which every
    function that finishes jobs may send to, is not a job queue: tests/infra/test_table_grants.py and
    the webhook tests cover it."""
    webhooks = target_id(synth.json["Outputs"]["WebhookQueueUrl"]["Value"])
    return {
        resource if isinstance(resource, str) else target_id(resource)
        for statement in role_statements(synth, function_id)
        if statement["Effect"] == "Allow" and "sqs:SendMessage" in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
    } - {webhooks}


def _bedrock_grant(synth: Synth, function_id: str) -> dict[str, str]:
    """Bedrock action -> JSON of the resources it is granted on (every statement's)."""
    granted: dict[str, str] = {}
    for statement in role_statements(synth, function_id):
        for action in _as_list(statement["Action"]):
            if action.startswith("bedrock:"):
                granted[action] = granted.get(action, "") + json.dumps(statement["Resource"], sort_keys=True)
    return granted


# --- the report <-> summary pair -----------------------------------------------------------------


def test_report_consumer_gets_the_summary_queue_url_and_may_send_to_it(dev: Synth) -> None:
    report = _consumer(dev, "report")
    env = _env(dev, report)
    summary_queue = _queue(dev, "summary")
    assert env["LINKED_QUEUES"] == "summary"
    assert env["Q_SUMMARY"] == {"Ref": summary_queue}
    assert _queue_bindings(env) == {"Q_SUMMARY"}
    assert _send_targets(dev, report) == {_queue(dev, "report"), _queue(dev, "report", "-dlq"), summary_queue}


def test_summary_consumer_gets_the_report_queue_url_and_may_send_to_it(dev: Synth) -> None:
    summary = _consumer(dev, "summary")
    env = _env(dev, summary)
    report_queue = _queue(dev, "report")
    assert env["LINKED_QUEUES"] == "report"
    assert env["Q_REPORT"] == {"Ref": report_queue}
    assert _queue_bindings(env) == {"Q_REPORT"}
    assert _send_targets(dev, summary) == {
        _queue(dev, "summary"),
        _queue(dev, "summary", "-dlq"),
        report_queue,
    }


@pytest.mark.parametrize("kind", ["tts-generate", "video-generate"])
def test_a_kind_outside_every_workflow_links_no_queue_and_sends_only_to_its_own(
    dev: Synth, kind: str
) -> None:
    function_id = _consumer(dev, kind)
    env = _env(dev, function_id)
    assert env["LINKED_QUEUES"] == ""
    assert _queue_bindings(env) == set()
    assert _send_targets(dev, function_id) == {_queue(dev, kind), _queue(dev, kind, "-dlq")}


def test_shipped_dev_stage_links_every_workflow_to_its_child_and_back(dev: Synth) -> None:
    expected = _expected_links(dev.config.queue_names)
    assert (expected["report"], expected["summary"]) == ({"summary"}, {"report"})  # a shipped pair
    for kind, linked in expected.items():
        function_id = _consumer(dev, kind)
        env = _env(dev, function_id)
        assert set(split_list(env["LINKED_QUEUES"])) == linked, kind
        assert {key: target_id(env[key]) for key in _queue_bindings(env)} == {
            binding_name(other): _queue(dev, other) for other in linked
        }, kind
        own = {_queue(dev, kind), _queue(dev, kind, "-dlq")}
        assert _send_targets(dev, function_id) == own | {_queue(dev, other) for other in linked}, kind


@pytest.mark.parametrize("fixture", ALL_FIXTURES)
def test_every_consumer_links_exactly_the_queues_its_stage_config_names(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    for kind in synth.config.queue_names:
        function_id = _consumer(synth, kind)
        env = _env(synth, function_id)
        linked = synth.config.linked_queues(kind)
        assert split_list(env["LINKED_QUEUES"]) == linked, kind
        assert {key: target_id(env[key]) for key in _queue_bindings(env)} == {
            binding_name(other): _queue(synth, other) for other in linked
        }, kind
        own = {_queue(synth, kind), _queue(synth, kind, "-dlq")}
        assert _send_targets(synth, function_id) == own | {_queue(synth, other) for other in linked}, kind


def test_without_a_configured_workflow_no_consumer_links_a_queue(capped: Synth) -> None:
    # summary and embedding are child kinds, but report and embedding-batch are not configured.
    assert capped.config.workflow_children == {}
    for kind in ("summary", "embedding"):
        function_id = _consumer(capped, kind)
        assert _env(capped, function_id)["LINKED_QUEUES"] == ""
        assert _queue_bindings(_env(capped, function_id)) == set()
        assert _send_targets(capped, function_id) == {_queue(capped, kind), _queue(capped, kind, "-dlq")}


# --- the DLQ consumer ----------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ALL_FIXTURES)
def test_dlq_consumer_gets_every_kinds_queue_and_may_send_only_to_those(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    function_id = _dlq_consumer(synth)
    env = _env(synth, function_id)
    kinds = synth.config.queue_names
    assert split_list(env["QUEUE_NAMES"]) == kinds
    assert "LINKED_QUEUES" not in env
    assert {key: target_id(env[key]) for key in _queue_bindings(env)} == {
        binding_name(kind): _queue(synth, kind) for kind in kinds
    }
    # Main queues only: never a DLQ (the consumer moves messages there, the DLQ consumer does not).
    assert _send_targets(synth, function_id) == {_queue(synth, kind) for kind in kinds}


# --- settings models -----------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ALL_FIXTURES)
def test_every_function_environment_reads_back_its_linked_queues_through_its_settings_model(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    functions = synth.resources("AWS::Lambda::Function")
    assert {f["Properties"]["Handler"] for f in functions.values()} == set(SETTINGS_BY_HANDLER)
    for logical_id, resource in functions.items():
        props = resource["Properties"]
        settings = SETTINGS_BY_HANDLER[props["Handler"]].from_env(symbolic_environment(props))
        assert settings.stage == synth.config.stage, logical_id
        if isinstance(settings, ConsumerSettings):
            kind = settings.queue_name
            assert settings.linked_queue_urls == {
                other: f"ref:{_queue(synth, other)}" for other in synth.config.linked_queues(kind)
            }, logical_id
            assert settings.stuck_queued_seconds == synth.config.stuck_queued_seconds, logical_id
            assert settings.queue_url == f"ref:{_queue(synth, kind)}", logical_id
        elif isinstance(settings, DlqSettings):
            assert settings.queue_urls == {
                kind: f"ref:{_queue(synth, kind)}" for kind in synth.config.queue_names
            }, logical_id


@pytest.mark.parametrize(("kind", "binding"), [("report", "Q_SUMMARY"), ("summary", "Q_REPORT")])
def test_a_consumer_environment_without_its_linked_queue_url_is_refused(
    dev: Synth, kind: str, binding: str
) -> None:
    env = symbolic_environment(dev.props(_consumer(dev, kind)))
    ConsumerSettings.from_env(env)
    del env[binding]
    with pytest.raises(ValueError, match=binding):
        ConsumerSettings.from_env(env)


def test_dlq_environment_without_a_workflow_queue_url_is_refused(dev: Synth) -> None:
    env = symbolic_environment(dev.props(_dlq_consumer(dev)))
    DlqSettings.from_env(env)
    del env["Q_IMAGE_BATCH"]
    with pytest.raises(ValueError, match="Q_IMAGE_BATCH"):
        DlqSettings.from_env(env)


# --- model access --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workflow", "child"),
    [("report", "summary"), ("embedding-batch", "embedding"), ("image-batch", "image-generate")],
)
def test_a_workflow_consumer_may_invoke_exactly_its_child_kinds_models(
    dev: Synth, workflow: str, child: str
) -> None:
    parent_grant = _bedrock_grant(dev, _consumer(dev, workflow))
    assert parent_grant
    assert parent_grant == _bedrock_grant(dev, _consumer(dev, child))


def test_report_consumer_may_invoke_summarys_default_and_allow_listed_models(dev: Synth) -> None:
    report = _bedrock_grant(dev, _consumer(dev, "report"))
    assert set(report) == {"bedrock:InvokeModel"}
    # .env.dev: summary=us.amazon.nova-lite-v1:0, allow-listed us.amazon.nova-pro-v1:0.
    assert "inference-profile/us.amazon.nova-lite-v1:0" in report["bedrock:InvokeModel"]
    assert "foundation-model/amazon.nova-lite-v1:0" in report["bedrock:InvokeModel"]
    assert "inference-profile/us.amazon.nova-pro-v1:0" in report["bedrock:InvokeModel"]
    assert "nova-micro" not in report["bedrock:InvokeModel"]


def test_workflows_follow_their_child_kinds_configured_provider_and_models(openai_children: Synth) -> None:
    report = _bedrock_grant(openai_children, _consumer(openai_children, "report"))
    assert set(report) == {"bedrock:InvokeModel"}
    assert "foundation-model/amazon.nova-pro-v1:0" in report["bedrock:InvokeModel"]
    assert "foundation-model/amazon.nova-micro-v1:0" in report["bedrock:InvokeModel"]
    assert "nova-lite" not in report["bedrock:InvokeModel"]
    assert report == _bedrock_grant(openai_children, _consumer(openai_children, "summary"))
    env = _env(openai_children, _consumer(openai_children, "report"))
    assert env["PROVIDER"] == "bedrock"
    # embedding runs on OpenAI, so embedding-batch reads the key secret and may not use Bedrock.
    batch = _consumer(openai_children, "embedding-batch")
    assert _env(openai_children, batch)["PROVIDER"] == "openai"
    assert _bedrock_grant(openai_children, batch) == {}
    secret_reads = [
        json.dumps(statement["Resource"])
        for statement in role_statements(openai_children, batch)
        if "secretsmanager:GetSecretValue" in _as_list(statement["Action"])
    ]
    assert len(secret_reads) == 1
    assert "secret:aijobs/openai-key-??????" in secret_reads[0]
