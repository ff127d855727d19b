"""EventBridge Scheduler schedules generated from CRONS, all pointing at the one dispatcher."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aijobs.scheduled.dispatcher import PAYLOAD_CRON, PAYLOAD_SCHEDULED_TIME
from tests.infra.template import Synth, target_id

pytestmark = pytest.mark.infra


def _schedules(synth: Synth) -> dict[str, dict[str, Any]]:
    by_cron = {}
    for resource in synth.resources("AWS::Scheduler::Schedule").values():
        props = resource["Properties"]
        payload = json.loads(props["Target"]["Input"])
        by_cron[payload[PAYLOAD_CRON]] = props
    return by_cron


def test_the_shipped_cron_becomes_an_aws_cron_with_its_exact_text_in_the_payload(dev: Synth) -> None:
    schedules = _schedules(dev)
    # One schedule per configured cron, each in its AWS form.
    assert set(schedules) == {cron.text for cron in dev.config.crons}
    for cron in dev.config.crons:
        assert schedules[cron.text]["ScheduleExpression"] == cron.to_aws(), cron.text
    props = schedules["*/10 * * * *"]
    assert props["ScheduleExpression"] == "cron(0/10 * * * ? *)"
    assert props["ScheduleExpressionTimezone"] == "Etc/UTC"
    assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
    payload = json.loads(props["Target"]["Input"])
    assert payload[PAYLOAD_SCHEDULED_TIME] == "<aws.scheduler.scheduled-time>"


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_the_weekly_model_check_runs_on_monday_mornings(fixture: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    (dispatcher_id,) = synth.functions_by_handler("cron_dispatcher.handler.handler")
    props = _schedules(synth)["0 6 * * 1"]
    # AWS numbers weekdays from Sunday = 1: Monday is 2, and the day-of-month is the '?'.
    assert props["ScheduleExpression"] == "cron(0 6 ? * 2 *)"
    assert props["ScheduleExpressionTimezone"] == "Etc/UTC"
    assert target_id(props["Target"]["Arn"]) == dispatcher_id


def test_every_schedule_targets_the_cron_dispatcher(capped: Synth) -> None:
    (dispatcher_id,) = capped.functions_by_handler("cron_dispatcher.handler.handler")
    schedules = _schedules(capped)
    assert schedules["*/5 * * * *"]["ScheduleExpression"] == "cron(0/5 * * * ? *)"
    for props in schedules.values():
        assert target_id(props["Target"]["Arn"]) == dispatcher_id
        assert props["Target"]["RetryPolicy"]["MaximumRetryAttempts"] == 2


def test_empty_crons_means_no_schedules(single_consumer: Synth) -> None:
    assert single_consumer.config.crons == ()
    assert single_consumer.resources("AWS::Scheduler::Schedule") == {}
    assert single_consumer.resources("AWS::Scheduler::ScheduleGroup") == {}
