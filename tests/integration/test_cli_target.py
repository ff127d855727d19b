"""The CLI finds a deployed stage from its CloudFormation outputs (moto stands in for AWS)."""

from __future__ import annotations

import json
import os

import boto3
import pytest
from moto import mock_aws

from aijobs_cli.target import Target

pytestmark = pytest.mark.integration


def test_stack_outputs_become_a_target(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI sets the region for the whole process; have it restored after this test.
    monkeypatch.setenv("AWS_DEFAULT_REGION", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    outputs = {
        "ApiUrl": "https://abc.execute-api.eu-west-1.amazonaws.com/",
        "MetaTableName": "aijobs-prod-TablesMeta",
        "ShardTableNames": "aijobs-prod-Shard0,aijobs-prod-Shard1",
        "BucketName": "aijobs-prod-bucket",
        "AlertTopicArn": "arn:aws:sns:eu-west-1:123456789012:alerts",
        "QueueUrlQSUMMARY": "https://sqs.eu-west-1.amazonaws.com/123456789012/aijobs-prod-summary",
        "DlqUrlQSUMMARY": "https://sqs.eu-west-1.amazonaws.com/123456789012/aijobs-prod-summary-dlq",
        "QueueUrlQTTSGENERATE": "https://sqs.eu-west-1.amazonaws.com/123456789012/aijobs-prod-tts-generate",
        "ConsumerFunctionQTTSGENERATE": "aijobs-prod-QueuettsgenerateConsumer-abc",
        "CronDispatcherFunction": "aijobs-prod-CronDispatcher-xyz",
    }
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    with mock_aws():
        boto3.client("cloudformation", region_name="eu-west-1").create_stack(
            StackName="aijobs-prod", TemplateBody=json.dumps(template)
        )
        target = Target.from_stack("aijobs-prod", region="eu-west-1", profile=None)
    assert target.stage == "prod"
    assert target.api_url == "https://abc.execute-api.eu-west-1.amazonaws.com"
    assert target.shard_tables == ["aijobs-prod-Shard0", "aijobs-prod-Shard1"]
    assert set(target.queue_urls) == {"summary", "tts-generate"}
    assert target.dlq_urls == {"summary": outputs["DlqUrlQSUMMARY"]}
    assert target.consumer_functions == {"tts-generate": outputs["ConsumerFunctionQTTSGENERATE"]}
    assert target.cron_function == "aijobs-prod-CronDispatcher-xyz"
    assert not target.is_local
