"""Where alerts go: ALERT_TOPIC_ARN, and the rule that a production stage must page someone."""

from __future__ import annotations

from pathlib import Path

import pytest
from dotenv import dotenv_values

from aijobs_cdk.stage_config import ConfigError, StageConfig, check_alert_destination, parse_stage_config

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPIC = "arn:aws:sns:eu-west-1:123456789012:team-pager"


def _parse(stage: str = "dev", **values: str) -> StageConfig:
    return parse_stage_config(stage, values)


@pytest.mark.parametrize(
    "arn",
    [
        TOPIC,
        " arn:aws:sns:us-east-1:123456789012:aijobs_alerts-1 ",
        "arn:aws-cn:sns:cn-north-1:123456789012:pager",
        "arn:aws-us-gov:sns:us-gov-west-1:123456789012:pager",
    ],
)
def test_alert_topic_arn_accepts_a_standard_topic(arn: str) -> None:
    assert _parse(ALERT_TOPIC_ARN=arn).alert_topic_arn == arn.strip()


@pytest.mark.parametrize(
    "arn",
    [
        "team-pager",
        "arn:aws:sqs:eu-west-1:123456789012:team-pager",  # a queue, not a topic
        "arn:aws:sns:eu-west-1:1234:team-pager",  # not a 12-digit account
        "arn:aws:sns:eu-west-1:123456789012:team-pager.fifo",  # alarms cannot publish to FIFO
        "arn:aws:sns:eu-west-1:123456789012:team-pager:0d4d1ef0-subscription",  # a subscription
        "arn:aws:sns::123456789012:team-pager",  # no region
    ],
)
def test_alert_topic_arn_rejects_anything_else_naming_the_key(arn: str) -> None:
    with pytest.raises(ConfigError, match=r"ALERT_TOPIC_ARN=.* is not a standard SNS topic ARN"):
        _parse(ALERT_TOPIC_ARN=arn)


def test_empty_alert_topic_arn_means_the_stack_creates_its_topic() -> None:
    assert _parse(ALERT_TOPIC_ARN="  ").alert_topic_arn is None


def test_production_without_an_alert_destination_is_refused_with_both_keys_named() -> None:
    config = _parse("prod")
    assert config.is_production
    with pytest.raises(ConfigError) as refused:
        check_alert_destination(config)
    message = str(refused.value)
    for hint in ("ALERT_EMAIL", "ALERT_TOPIC_ARN", "-c ALERT_EMAIL="):
        assert hint in message


@pytest.mark.parametrize("values", [{"ALERT_EMAIL": "ops@example.com"}, {"ALERT_TOPIC_ARN": TOPIC}])
def test_production_with_either_destination_is_accepted(values: dict[str, str]) -> None:
    check_alert_destination(_parse("prod", **values))


def test_other_stages_may_go_without_a_destination() -> None:
    check_alert_destination(_parse("dev"))


def test_the_shipped_prod_file_names_no_real_destination() -> None:
    """`.env.prod` ships without one (no real address in the repository): synthesizing prod needs
    one passed as context, which is the point."""
    shipped = parse_stage_config("prod", dotenv_values(REPO_ROOT / ".env.prod"))
    with pytest.raises(ConfigError, match="no alert destination"):
        check_alert_destination(shipped)
