"""Scheduled invocations that fail before the dispatcher can alert are retried within a bounded
window, then dead-lettered to an encrypted, TLS-only queue that alarms."""

from __future__ import annotations

from typing import Any

import pytest

from aijobs_cdk.constructs.schedules import (
    DEAD_LETTER_RETENTION,
    DELIVERY_MAX_EVENT_AGE,
    DELIVERY_RETRY_ATTEMPTS,
    INVOKE_MAX_EVENT_AGE,
    INVOKE_RETRY_ATTEMPTS,
)
from tests.infra.alarm_reader import (
    alarms,
    assert_encrypted_and_tls_only,
    can_send_to,
    function_can_send_to,
    stage_topic,
)
from tests.infra.template import Synth, target_id

pytestmark = pytest.mark.infra

CRON_HANDLER = "cron_dispatcher.handler.handler"


def _dead_letter_queue(synth: Synth) -> str:
    """The one queue every schedule dead-letters to."""
    (queue,) = {target_id(s["Properties"]["Target"]["DeadLetterConfig"]["Arn"]) for s in _schedules(synth)}
    return queue


def _schedules(synth: Synth) -> list[dict[str, Any]]:
    return list(synth.resources("AWS::Scheduler::Schedule").values())


def _role_statements(synth: Synth, role_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


@pytest.mark.parametrize("fixture", ["dev", "capped"])
def test_every_schedule_retries_delivery_briefly_then_dead_letters(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    schedules = _schedules(synth)
    assert len(schedules) == len(synth.config.crons)
    queue = _dead_letter_queue(synth)
    for schedule in schedules:
        target = schedule["Properties"]["Target"]
        assert target["RetryPolicy"] == {
            "MaximumRetryAttempts": DELIVERY_RETRY_ATTEMPTS,
            "MaximumEventAgeInSeconds": DELIVERY_MAX_EVENT_AGE.to_seconds(),
        }
        assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue, "Arn"]}}
        # Scheduler sends a failed delivery to the DLQ with the schedule's own role.
        assert can_send_to(_role_statements(synth, target_id(target["RoleArn"])), queue)
    # Bounded: a late firing is not worth delivering (the next one does the same work).
    assert DELIVERY_RETRY_ATTEMPTS <= 3
    assert DELIVERY_MAX_EVENT_AGE.to_minutes() <= 10


def test_a_crashed_invocation_is_retried_by_lambda_then_sent_to_the_same_queue(dev: Synth) -> None:
    (dispatcher,) = dev.functions_by_handler(CRON_HANDLER)
    queue = _dead_letter_queue(dev)
    (config,) = dev.resources("AWS::Lambda::EventInvokeConfig").values()
    props = config["Properties"]
    assert target_id(props["FunctionName"]) == dispatcher
    assert props["MaximumRetryAttempts"] == INVOKE_RETRY_ATTEMPTS
    assert props["MaximumEventAgeInSeconds"] == INVOKE_MAX_EVENT_AGE.to_seconds()
    assert props["DestinationConfig"] == {"OnFailure": {"Destination": {"Fn::GetAtt": [queue, "Arn"]}}}
    assert function_can_send_to(dev, dispatcher, queue)


def test_the_cron_dead_letter_queue_is_encrypted_tls_only_kept_and_alarmed(dev: Synth) -> None:
    queue = _dead_letter_queue(dev)
    assert_encrypted_and_tls_only(dev, queue)
    assert dev.props(queue)["MessageRetentionPeriod"] == DEAD_LETTER_RETENTION.to_seconds()
    alarm = alarms(dev)["cron-dead-letters"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Maximum", 300, 1)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == alarm["OKActions"] == [stage_topic(dev)]


def test_without_crons_nothing_invokes_the_dispatcher_asynchronously(single_consumer: Synth) -> None:
    assert "cron-dead-letters" not in alarms(single_consumer)
    (config,) = single_consumer.resources("AWS::Lambda::EventInvokeConfig").values()
    assert config["Properties"]["MaximumRetryAttempts"] == 0
    assert "DestinationConfig" not in config["Properties"]
