"""Local stacks started one after another in one process (tests, the soak CLI) each start empty."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from aijobs_cdk.stage import load_stage_config
from aijobs_cli.local.stack import LocalStack
from tests.integration.harness import restored_process_state

pytestmark = pytest.mark.integration


@pytest.fixture
def restore_process_state() -> Iterator[None]:
    with restored_process_state():
        yield


def test_a_second_stack_with_other_queue_attributes_starts_empty(restore_process_state: None) -> None:
    with LocalStack(
        load_stage_config("local", {"CONSUMER_TIMEOUT_SECONDS": "3"}), log=lambda _l: None
    ) as first:
        boto3.client("sqs").create_queue(QueueName="left-behind")
    # Another consumer timeout gives every queue another visibility timeout: moto would refuse to
    # "create" the first stack's queues again with different attributes.
    with LocalStack(load_stage_config("local"), log=lambda _l: None) as second:
        assert second.endpoint_url != first.endpoint_url
        urls = boto3.client("sqs").list_queues().get("QueueUrls", [])
        assert urls
        assert not any(url.endswith("/left-behind") for url in urls)
