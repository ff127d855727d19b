"""Operator alerts on the stage's SNS topic. Alerts carry ids and error classes, never user input."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient


class Alerts:
    def __init__(self, sns: SNSClient, topic_arn: str) -> None:
        self._sns = sns
        self._topic_arn = topic_arn

    def publish(self, subject: str, detail: dict[str, Any]) -> None:
        self._sns.publish(
            TopicArn=self._topic_arn,
            Subject=subject[:100],
            Message=json.dumps({"subject": subject, **detail}, default=str),
        )
