"""Names and removal of the stage's stateful resources (queues; tables and bucket are never named).

Production: CloudFormation generates queue names and deleting the stack (or replacing a queue)
retains the old queue with its messages. A generated name is what lets a replacement, or the same
stack deployed again after a deletion, create its queue while the retained one still exists; a fixed
name would collide with it. Functions never read a kind out of a queue name (they get their queues
from the environment), so nothing depends on the name.

Other stages: readable fixed names (`aijobs-<stage>-<kind>`, as the local stack and the shipped
events use) and the queues go with the stack.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from aijobs_cdk.stage_config import ConfigError, StageConfig


def stage_queue(
    scope: Construct,
    construct_id: str,
    *,
    config: StageConfig,
    name: str,
    retention_period: Duration,
    dead_letter_queue: sqs.DeadLetterQueue | None = None,
    **props: Any,
) -> sqs.Queue:
    """A queue of the stage: named `name` outside production (CloudFormation names it in
    production), kept or removed with the stack as `stateful_removal` says, encrypted (SQS-managed
    keys) and refusing plain HTTP. `props`: the rest of the queue (visibility, ...).

    Its dead-letter queue must keep messages longer than it does: SQS keeps a message's first
    enqueue time when it moves the message to a DLQ (standard queues), so a DLQ that keeps no
    longer drops a dead letter as soon as it arrives. Anything else is refused at synth."""
    if dead_letter_queue is not None:
        kept = _retention_seconds(dead_letter_queue.queue)
        if kept <= retention_period.to_seconds():
            raise ConfigError(
                f"the dead-letter queue of {name} keeps messages {kept // 86_400} days, no longer than "
                f"{name} itself ({retention_period.to_days()} days): SQS counts retention from a "
                "message's first send, so it must keep longer (see docs/operations/runbook.md)"
            )
    return sqs.Queue(
        scope,
        construct_id,
        queue_name=None if config.is_production else name,
        removal_policy=stateful_removal(config),
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=retention_period,
        dead_letter_queue=dead_letter_queue,
        **props,
    )


# SQS keeps a message 4 days unless told otherwise.
_SQS_DEFAULT_RETENTION_SECONDS = 4 * 86_400


def _retention_seconds(queue: sqs.IQueue) -> int:
    """The retention a queue of this app was created with (its CloudFormation property)."""
    resource = queue.node.default_child
    assert isinstance(resource, sqs.CfnQueue), "a dead-letter queue of this stack"
    period = resource.message_retention_period
    return _SQS_DEFAULT_RETENTION_SECONDS if period is None else int(period)


def stateful_removal(config: StageConfig) -> RemovalPolicy:
    """What deleting the stack does to a queue or table: kept in production, removed elsewhere."""
    return RemovalPolicy.RETAIN if config.is_production else RemovalPolicy.DESTROY
