"""Readers for the alarms and alert plumbing of a synthesized template."""

from __future__ import annotations

from typing import Any

from aijobs_cdk.stage_config import (
    CRON_DEAD_LETTER_QUEUE,
    DLQ_SUFFIX,
    PARKING_QUEUE,
    WEBHOOK_QUEUE,
    resource_prefix,
)
from tests.infra.template import Synth, role_statements

LAMBDA_HANDLER_NAMES = {
    "api.handler.handler": "api",
    "dlq_consumer.handler.handler": "dlq-consumer",
    "cron_dispatcher.handler.handler": "cron-dispatcher",
    "webhook_consumer.handler.handler": "webhook-consumer",
}


def alarms(synth: Synth) -> dict[str, dict[str, Any]]:
    """Every alarm's properties by its short name (the alarm name without `aijobs-<stage>-`)."""
    prefix = resource_prefix(synth.config.stage) + "-"
    by_name = {}
    for resource in synth.resources("AWS::CloudWatch::Alarm").values():
        props = resource["Properties"]
        assert props["AlarmName"].startswith(prefix), props["AlarmName"]
        by_name[props["AlarmName"].removeprefix(prefix)] = props
    return by_name


def stage_topic(synth: Synth) -> Any:
    """How the template refers to the stage's alert topic: the ARN given as ALERT_TOPIC_ARN, else
    a Ref to the one topic the stack creates."""
    if synth.config.alert_topic_arn:
        assert synth.resources("AWS::SNS::Topic") == {}
        return synth.config.alert_topic_arn
    (topic_id,) = synth.resources("AWS::SNS::Topic")
    return {"Ref": topic_id}


def function_names(synth: Synth) -> dict[str, str]:
    """Logical id -> the short name its alarms use (`api`, `summary-consumer`, ...)."""
    names = {}
    for logical_id, resource in synth.resources("AWS::Lambda::Function").items():
        props = resource["Properties"]
        handler = props["Handler"]
        if handler == "queue_consumer.handler.handler":
            names[logical_id] = f"{props['Environment']['Variables']['QUEUE_NAME']}-consumer"
        else:
            names[logical_id] = LAMBDA_HANDLER_NAMES[handler]
    return names


def queue_id(synth: Synth, queue_name: str) -> str:
    """The logical id of the queue a stage names `queue_name` outside production (`aijobs-dev-summary`,
    `...-summary-dlq`, `...-dlq-parking`, `...-cron-dead-letters`), found by construct path, since
    production queues have generated names; where the queue is named, the name must match."""
    short = queue_name.removeprefix(resource_prefix(synth.config.stage) + "-")
    if short == PARKING_QUEUE:
        path = ["DlqParking", "Queue"]
    elif short == CRON_DEAD_LETTER_QUEUE:
        path = ["Schedules", "DeadLetters"]
    elif short in (WEBHOOK_QUEUE, WEBHOOK_QUEUE + DLQ_SUFFIX):
        path = ["Webhooks", "Dlq" if short.endswith(DLQ_SUFFIX) else "Queue"]
    elif short.endswith(DLQ_SUFFIX):
        path = [f"Queue-{short.removesuffix(DLQ_SUFFIX)}", "Dlq"]
    else:
        path = [f"Queue-{short}", "Queue"]
    construct: Any = synth.stack
    for name in path:
        construct = construct.node.find_child(name)
    logical_id = str(synth.stack.resolve(construct.node.default_child.logical_id))
    named = synth.props(logical_id).get("QueueName")
    assert named in (None, queue_name), (logical_id, named, queue_name)
    return logical_id


def assert_encrypted_and_tls_only(synth: Synth, logical_id: str) -> None:
    assert synth.props(logical_id)["SqsManagedSseEnabled"] is True
    denies = [
        statement
        for policy in synth.resources("AWS::SQS::QueuePolicy").values()
        if {"Ref": logical_id} in policy["Properties"]["Queues"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny"
    ]
    assert denies == [
        {
            "Action": "sqs:*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Resource": {"Fn::GetAtt": [logical_id, "Arn"]},
        }
    ]


def can_send_to(statements: list[dict[str, Any]], queue_logical_id: str) -> bool:
    arn = {"Fn::GetAtt": [queue_logical_id, "Arn"]}
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        if statement["Effect"] == "Allow" and "sqs:SendMessage" in actions and arn in resources:
            return True
    return False


def function_can_send_to(synth: Synth, function_id: str, queue_logical_id: str) -> bool:
    return can_send_to(role_statements(synth, function_id), queue_logical_id)
