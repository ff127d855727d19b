"""Per-kind queues: partial-batch mappings, redrive, visibility and retention rules."""

from __future__ import annotations

from typing import Any

import pytest

from aijobs_cdk.constructs.dead_letters import DLQ_HANDLER
from aijobs_cdk.constructs.job_queue import CONSUMER_HANDLER
from aijobs_cdk.constructs.webhooks import WEBHOOK_HANDLER
from aijobs_cdk.stage_config import RECEIVE_HEADROOM, queue_resource_name
from aijobs_cli.local.stack import CONSUMER, DLQ_CONSUMER, WEBHOOK_CONSUMER, MappingPlan, mapping_plans
from tests.infra.template import Synth, target_id

pytestmark = pytest.mark.infra


def _main_queues(synth: Synth) -> dict[str, dict[str, Any]]:
    names = {queue_resource_name(synth.config.stage, kind) for kind in synth.config.queue_names}
    return {
        logical_id: resource["Properties"]
        for logical_id, resource in synth.resources("AWS::SQS::Queue").items()
        if resource["Properties"]["QueueName"] in names
    }


def test_every_event_source_mapping_reports_batch_item_failures(dev: Synth) -> None:
    mappings = dev.resources("AWS::Lambda::EventSourceMapping")
    # One consumer mapping per queue, one DLQ-consumer mapping per DLQ, the webhook consumer's.
    assert len(mappings) == 2 * len(dev.config.queue_names) + 1
    for logical_id, mapping in mappings.items():
        assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"], logical_id


def test_each_configured_queue_has_a_queue_and_dlq_named_for_the_stage(dev: Synth) -> None:
    names = {
        props["QueueName"] for props in (r["Properties"] for r in dev.resources("AWS::SQS::Queue").values())
    }
    for kind in ("image-generate", "tts-generate", "video-generate", "summary", "embedding"):
        assert queue_resource_name("dev", kind) in names
        assert queue_resource_name("dev", kind) + "-dlq" in names


def test_redrive_sends_to_the_kinds_own_dlq_after_the_budget_plus_headroom(dev: Synth) -> None:
    queues = _main_queues(dev)
    assert len(queues) == len(dev.config.queue_names)
    for props in queues.values():
        redrive = props["RedrivePolicy"]
        assert redrive["maxReceiveCount"] == dev.config.max_retries + 1 + RECEIVE_HEADROOM == 9
        dlq = dev.props(target_id(redrive["deadLetterTargetArn"]))
        assert dlq["QueueName"] == props["QueueName"] + "-dlq"


def test_max_retries_setting_drives_max_receive_count(capped: Synth) -> None:
    for props in _main_queues(capped).values():
        assert props["RedrivePolicy"]["maxReceiveCount"] == 3 + RECEIVE_HEADROOM


def test_consumer_mapping_uses_the_article_defaults_unless_the_kind_declares_its_own(dev: Synth) -> None:
    names = {queue_resource_name("dev", kind): kind for kind in dev.config.queue_names}
    for queue_id, props in _main_queues(dev).items():
        (mapping,) = [
            m["Properties"]
            for m in dev.resources("AWS::Lambda::EventSourceMapping").values()
            if target_id(m["Properties"]["EventSourceArn"]) == queue_id
        ]
        own = dict(dev.config.kind_tuning).get(names[props["QueueName"]])
        assert mapping["BatchSize"] == (own.batch_size if own and own.batch_size else 5)
        assert mapping["MaximumBatchingWindowInSeconds"] == 10
        assert "ScalingConfig" not in mapping  # QUEUE_MAX_CONCURRENCY is empty in .env.dev


@pytest.mark.parametrize("fixture", ["dev", "capped", "single_consumer"])
def test_visibility_timeout_is_at_least_six_times_the_consumer_timeout_plus_window(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    mappings = synth.resources("AWS::Lambda::EventSourceMapping").values()
    checked = 0
    for mapping in mappings:
        props = mapping["Properties"]
        queue = synth.props(target_id(props["EventSourceArn"]))
        function = synth.props(target_id(props["FunctionName"]))
        window = props.get("MaximumBatchingWindowInSeconds", 0)
        assert queue["VisibilityTimeout"] >= 6 * function["Timeout"] + window, queue["QueueName"]
        checked += 1
    assert checked == 2 * len(synth.config.queue_names) + 1  # + the webhook consumer's


DAY = 24 * 3600


def test_every_dead_letter_queue_outlives_the_queue_it_catches(dev: Synth) -> None:
    """SQS keeps a message's first enqueue time when it dead-letters it, so each queue of a redrive
    chain keeps longer than the one before: a job queue 4 days, its DLQ 7, the parking queue of
    the DLQs 14 (the most SQS keeps); the webhook queue 4, its DLQ 14."""
    chains = 0
    for logical_id, resource in dev.resources("AWS::SQS::Queue").items():
        props = resource["Properties"]
        if "RedrivePolicy" not in props:
            continue
        dlq = dev.props(target_id(props["RedrivePolicy"]["deadLetterTargetArn"]))
        assert dlq["MessageRetentionPeriod"] > props["MessageRetentionPeriod"], logical_id
        chains += 1
    assert chains == 2 * len(dev.config.queue_names) + 1  # job queues, their DLQs, the webhook queue
    for props in _main_queues(dev).values():
        dlq = dev.props(target_id(props["RedrivePolicy"]["deadLetterTargetArn"]))
        parking = dev.props(target_id(dlq["RedrivePolicy"]["deadLetterTargetArn"]))
        assert [q["MessageRetentionPeriod"] for q in (props, dlq, parking)] == [4 * DAY, 7 * DAY, 14 * DAY]


def test_a_dead_letter_queue_that_would_not_outlive_its_source_is_refused_at_synth() -> None:
    import aws_cdk as cdk
    from aws_cdk import aws_sqs as sqs

    from aijobs_cdk.constructs.naming import stage_queue
    from aijobs_cdk.stage_config import ConfigError
    from tests.unit.test_stage_config import _parse

    config = _parse()
    stack = cdk.Stack(cdk.App(), "Probe")
    dlq = stage_queue(stack, "Dlq", config=config, name="probe-dlq", retention_period=cdk.Duration.days(7))
    redrive = sqs.DeadLetterQueue(queue=dlq, max_receive_count=3)
    for days in (7, 14):
        with pytest.raises(ConfigError, match="no longer than probe-source"):
            stage_queue(
                stack, f"Source{days}", config=config, name="probe-source",
                retention_period=cdk.Duration.days(days), dead_letter_queue=redrive,
            )  # fmt: skip
    stage_queue(
        stack, "Source", config=config, name="probe-source",
        retention_period=cdk.Duration.days(6), dead_letter_queue=redrive,
    )  # fmt: skip


def test_all_queues_are_encrypted_and_refuse_plain_http(dev: Synth) -> None:
    queues = dev.resources("AWS::SQS::Queue")
    for props in (q["Properties"] for q in queues.values()):
        assert props["SqsManagedSseEnabled"] is True
    tls_protected: set[str] = set()
    for policy in dev.resources("AWS::SQS::QueuePolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement["Condition"] == {
                "Bool": {"aws:SecureTransport": "false"}
            }:
                tls_protected.update(target_id(ref) for ref in policy["Properties"]["Queues"])
    assert tls_protected == set(queues)


def test_max_concurrency_is_set_on_each_consumer_mapping(capped: Synth) -> None:
    consumer_mappings = [
        m["Properties"]
        for m in capped.resources("AWS::Lambda::EventSourceMapping").values()
        if not capped.props(target_id(m["Properties"]["EventSourceArn"]))["QueueName"].endswith("-dlq")
        and not m["Properties"]["FunctionName"]["Ref"].startswith("WebhooksConsumer")
    ]
    assert len(consumer_mappings) == 2  # "summary; embedding ;summary" trimmed and de-duplicated
    for props in consumer_mappings:
        assert props["ScalingConfig"] == {"MaximumConcurrency": 5}


def test_concurrency_one_becomes_reserved_concurrency_with_throttle_headroom(single_consumer: Synth) -> None:
    consumers = single_consumer.functions_by_handler("queue_consumer.handler.handler")
    assert [props["ReservedConcurrentExecutions"] for props in consumers.values()] == [1]
    for mapping in single_consumer.resources("AWS::Lambda::EventSourceMapping").values():
        assert "ScalingConfig" not in mapping["Properties"]
    (queue,) = _main_queues(single_consumer).values()
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 3 + 1 + RECEIVE_HEADROOM


@pytest.mark.parametrize("fixture", ["dev", "capped", "single_consumer"])
def test_the_local_stack_polls_each_queue_as_its_template_mapping_does(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """`aijobs dev` gives every mapping (the DLQ consumer's and the webhook consumer's too) the batch
    size and batching window the template gives it."""
    synth: Synth = request.getfixturevalue(fixture)
    roles = {CONSUMER_HANDLER: CONSUMER, DLQ_HANDLER: DLQ_CONSUMER, WEBHOOK_HANDLER: WEBHOOK_CONSUMER}
    template = {}
    for mapping in synth.resources("AWS::Lambda::EventSourceMapping").values():
        props = mapping["Properties"]
        queue = synth.props(target_id(props["EventSourceArn"]))["QueueName"]
        handler = synth.props(target_id(props["FunctionName"]))["Handler"]
        window = props.get("MaximumBatchingWindowInSeconds", 0)
        template[queue] = MappingPlan(roles[handler], props["BatchSize"], window)
    assert mapping_plans(synth.config) == template
