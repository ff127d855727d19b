"""Pausing and resuming a kind's consumer by switching its SQS event-source mapping.

A 401/403 from the provider means every following job of that kind will fail the same way:
stop consuming (messages wait in the queue, receive counts untouched) until an operator fixes
the secret and resumes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient


class ConsumerControl:
    def __init__(self, lambda_client: LambdaClient) -> None:
        self._lambda = lambda_client

    def set_enabled(self, function_name: str, queue_arn: str, *, enabled: bool) -> list[str]:
        """Enable or disable the mappings from `queue_arn` to `function_name`; returns their UUIDs."""
        paginator = self._lambda.get_paginator("list_event_source_mappings")
        changed = []
        for page in paginator.paginate(FunctionName=function_name, EventSourceArn=queue_arn):
            for mapping in page["EventSourceMappings"]:
                self._lambda.update_event_source_mapping(UUID=mapping["UUID"], Enabled=enabled)
                changed.append(mapping["UUID"])
        return changed
