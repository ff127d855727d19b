"""Every failure pages someone: each alarm's metric, statistic, threshold, comparison, periods and
its actions to the stage's alert topic; the parking of dead letters the DLQ consumer cannot handle;
and the rule that a production stage has an alert destination."""

from __future__ import annotations

from typing import Any

import pytest

from aijobs.observability import KIND_DIMENSION, METRIC_DEAD_LETTERED, METRICS_NAMESPACE, service_name
from aijobs_cdk.app_factory import build_app
from aijobs_cdk.constructs.alerts import (
    API_5XX_MIN_REQUESTS,
    API_5XX_PERIODS,
    API_5XX_RATE_PERCENT,
    DLQ_STUCK_PERIODS,
    OLDEST_MESSAGE_ALARM,
    OLDEST_MESSAGE_PERIODS,
    THROTTLE_PERIODS,
)
from aijobs_cdk.constructs.dead_letters import DLQ_CONSUMER_RECEIVES, PARKING_SUFFIX
from aijobs_cdk.constructs.job_queue import MAX_RETENTION
from aijobs_cdk.stage_config import ConfigError, queue_resource_name, resource_prefix
from tests.infra.alarm_reader import (
    alarms,
    assert_encrypted_and_tls_only,
    function_names,
    queue_id,
    stage_topic,
)
from tests.infra.conftest import EXTERNAL_TOPIC_ARN, PROD_ALERT_EMAIL
from tests.infra.template import Synth, cli_context

pytestmark = pytest.mark.infra

FIVE_MINUTES = 300
GTE = "GreaterThanOrEqualToThreshold"
GT = "GreaterThanThreshold"


def _expect(
    alarm: dict[str, Any],
    synth: Synth,
    *,
    namespace: str,
    metric: str,
    dimensions: dict[str, Any],
    statistic: str,
    threshold: float,
    comparison: str,
    periods: int,
    missing: str = "notBreaching",
) -> None:
    assert (alarm["Namespace"], alarm["MetricName"]) == (namespace, metric)
    assert {d["Name"]: d["Value"] for d in alarm["Dimensions"]} == dimensions
    assert (alarm["Statistic"], alarm["Period"]) == (statistic, FIVE_MINUTES)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (threshold, comparison)
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (periods, periods)
    assert alarm["TreatMissingData"] == missing
    assert alarm["AlarmActions"] == alarm["OKActions"] == [stage_topic(synth)]


@pytest.mark.parametrize("fixture", ["dev", "prod", "capped", "single_consumer"])
def test_every_alarm_notifies_the_stage_topic_when_it_fires_and_when_it_recovers(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    found = alarms(synth)
    assert found
    for name, alarm in found.items():
        assert alarm["AlarmActions"] == [stage_topic(synth)], name
        assert alarm["OKActions"] == [stage_topic(synth)], name
        assert alarm["AlarmDescription"], name


@pytest.mark.parametrize("fixture", ["dev", "capped"])
def test_every_function_alarms_on_errors_and_on_sustained_throttles(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    found = alarms(synth)
    names = function_names(synth)
    assert {"api", "dlq-consumer", "cron-dispatcher", "webhook-consumer"} | {
        f"{k}-consumer" for k in synth.config.queue_names
    } == set(names.values())
    for logical_id, name in names.items():
        function = {"FunctionName": {"Ref": logical_id}}
        _expect(
            found[f"{name}-errors"],
            synth,
            namespace="AWS/Lambda",
            metric="Errors",
            dimensions=function,
            statistic="Sum",
            threshold=1,
            comparison=GTE,
            periods=1,
        )
        _expect(
            found[f"{name}-throttles"],
            synth,
            namespace="AWS/Lambda",
            metric="Throttles",
            dimensions=function,
            statistic="Sum",
            threshold=1,
            comparison=GTE,
            periods=THROTTLE_PERIODS,
        )


def test_the_api_alarms_on_its_5xx_rate_with_enough_requests(dev: Synth) -> None:
    alarm = alarms(dev)["api-5xx-rate"]
    (api_id,) = dev.resources("AWS::ApiGatewayV2::Api")
    (stage,) = dev.resources("AWS::ApiGatewayV2::Stage").values()
    by_id = {m["Id"]: m for m in alarm["Metrics"]}
    (expression,) = [m for m in alarm["Metrics"] if m.get("ReturnData", True)]
    assert expression["Expression"] == (
        f"IF(requests >= {API_5XX_MIN_REQUESTS}, 100 * FILL(errors, 0) / requests, 0)"
    )
    stage_dimensions = [
        {"Name": "ApiId", "Value": {"Ref": api_id}},
        {"Name": "Stage", "Value": stage["Properties"]["StageName"]},
    ]
    for metric_id, metric_name in (("errors", "5xx"), ("requests", "Count")):
        stat = by_id[metric_id]["MetricStat"]
        assert stat["Metric"] == {
            "Namespace": "AWS/ApiGateway",
            "MetricName": metric_name,
            "Dimensions": stage_dimensions,
        }
        assert (stat["Stat"], stat["Period"]) == ("Sum", FIVE_MINUTES)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (API_5XX_RATE_PERCENT, GT)
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (API_5XX_PERIODS, API_5XX_PERIODS)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == alarm["OKActions"] == [stage_topic(dev)]


def test_each_kind_alarms_on_dead_letter_arrivals_backlog_age_and_a_dlq_that_never_drains(dev: Synth) -> None:
    found = alarms(dev)
    for kind in dev.config.queue_names:
        name = queue_resource_name(dev.config.stage, kind)
        main, dlq = queue_id(dev, name), queue_id(dev, name + "-dlq")
        _expect(
            found[f"{kind}-dead-letters"],
            dev,
            namespace=METRICS_NAMESPACE,
            metric=METRIC_DEAD_LETTERED,
            dimensions={"service": service_name(dev.config.stage), KIND_DIMENSION: kind},
            statistic="Sum",
            threshold=1,
            comparison=GTE,
            periods=1,
        )
        _expect(
            found[f"{kind}-backlog-age"],
            dev,
            namespace="AWS/SQS",
            metric="ApproximateAgeOfOldestMessage",
            dimensions={"QueueName": {"Fn::GetAtt": [main, "QueueName"]}},
            statistic="Maximum",
            threshold=OLDEST_MESSAGE_ALARM.to_seconds(),
            comparison=GT,
            periods=OLDEST_MESSAGE_PERIODS,
        )
        # Minimum over each period: never empty for DLQ_STUCK_PERIODS periods running.
        _expect(
            found[f"{kind}-dlq-not-draining"],
            dev,
            namespace="AWS/SQS",
            metric="ApproximateNumberOfMessagesVisible",
            dimensions={"QueueName": {"Fn::GetAtt": [dlq, "QueueName"]}},
            statistic="Minimum",
            threshold=0,
            comparison=GT,
            periods=DLQ_STUCK_PERIODS,
        )


@pytest.mark.parametrize("fixture", ["dev", "prod", "single_consumer"])
def test_every_job_dlq_parks_what_its_consumer_cannot_handle_and_parking_alarms(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    parking = queue_id(synth, resource_prefix(synth.config.stage) + PARKING_SUFFIX)
    assert_encrypted_and_tls_only(synth, parking)
    assert synth.props(parking)["MessageRetentionPeriod"] == MAX_RETENTION.to_seconds()
    assert "RedrivePolicy" not in synth.props(parking)  # the last stop
    for kind in synth.config.queue_names:
        dlq = queue_id(synth, queue_resource_name(synth.config.stage, kind) + "-dlq")
        assert synth.props(dlq)["RedrivePolicy"] == {
            "deadLetterTargetArn": {"Fn::GetAtt": [parking, "Arn"]},
            # More than the main queue's: a letter SQS dead-lettered may keep its receive count.
            "maxReceiveCount": synth.config.max_receive_count + DLQ_CONSUMER_RECEIVES,
        }
    _expect(
        alarms(synth)["dlq-parking"],
        synth,
        namespace="AWS/SQS",
        metric="ApproximateNumberOfMessagesVisible",
        dimensions={"QueueName": {"Fn::GetAtt": [parking, "QueueName"]}},
        statistic="Maximum",
        threshold=1,
        comparison=GTE,
        periods=1,
    )


def test_production_synthesizes_only_with_an_alert_destination() -> None:
    # The shipped .env.prod leaves ALERT_EMAIL empty; an empty context value is the same.
    with pytest.raises(ConfigError, match=r"no alert destination: set ALERT_EMAIL .* or ALERT_TOPIC_ARN"):
        build_app(cli_context({"stage": "prod", "ALERT_EMAIL": "", "ALERT_TOPIC_ARN": ""}))


def test_prod_subscribes_the_alert_email_to_its_topic(prod: Synth) -> None:
    (subscription,) = prod.resources("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == PROD_ALERT_EMAIL
    assert subscription["Properties"]["TopicArn"] == stage_topic(prod)


def test_an_alert_topic_arn_replaces_the_created_topic_everywhere(capped: Synth) -> None:
    assert capped.config.alert_topic_arn == EXTERNAL_TOPIC_ARN
    assert capped.resources("AWS::SNS::Topic") == {}
    functions = capped.resources("AWS::Lambda::Function")
    publishers = [
        f for f in functions.values() if "ALERT_TOPIC_ARN" in f["Properties"]["Environment"]["Variables"]
    ]
    # All but the API function and the webhook consumer (its give-ups alarm on its DLQ) alert.
    assert len(publishers) == len(functions) - 2
    for function in publishers:
        assert function["Properties"]["Environment"]["Variables"]["ALERT_TOPIC_ARN"] == EXTERNAL_TOPIC_ARN
    publish_grants = [
        statement
        for policy in capped.resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "sns:Publish"
    ]
    assert publish_grants
    assert all(s["Resource"] == EXTERNAL_TOPIC_ARN for s in publish_grants)
