"""Switching and sizing a kind's SQS event-source mapping: one Lambda client wrapper for all uses.

- Pausing: a 401/403 from the provider means every following job of that kind will fail the same
  way: stop consuming (messages wait in the queue, receive counts untouched) until an operator
  fixes the secret and resumes.
- Sizing: the adaptive concurrency cron (aijobs.scheduled.concurrency) reads and sets the
  mapping's `ScalingConfig.MaximumConcurrency`.

It sits at the package root because three functions use it (consumer, cron dispatcher, the CLI).
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

    def set_mapping_enabled(self, mapping_id: str, *, enabled: bool) -> None:
        """Switch one mapping by id (the operator console's pause/resume)."""
        self._lambda.update_event_source_mapping(UUID=mapping_id, Enabled=enabled)

    def mapping_enabled(self, mapping_id: str) -> bool | None:
        """Whether the mapping consumes (None: it is changing state, e.g. `Disabling`)."""
        state = self._lambda.get_event_source_mapping(UUID=mapping_id).get("State")
        return {"Enabled": True, "Disabled": False}.get(str(state))

    def max_concurrency(self, mapping_id: str) -> int | None:
        """The mapping's `MaximumConcurrency`, None when it has none (no limit but the account's)."""
        mapping = self._lambda.get_event_source_mapping(UUID=mapping_id)
        value = (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency")
        return int(value) if value else None

    def set_max_concurrency(self, mapping_id: str, value: int) -> None:
        """Set the mapping's `MaximumConcurrency` (2-1000): an absolute value, so a repeat is harmless."""
        self._lambda.update_event_source_mapping(UUID=mapping_id, ScalingConfig={"MaximumConcurrency": value})
