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

from aws_cdk import RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from aijobs.stage_config import StageConfig


def stage_queue(
    scope: Construct, construct_id: str, *, config: StageConfig, name: str, **props: Any
) -> sqs.Queue:
    """A queue of the stage: named `name` outside production (CloudFormation names it in
    production), kept or removed with the stack as `stateful_removal` says, encrypted (SQS-managed
    keys) and refusing plain HTTP. `props`: the rest of the queue (retention, redrive, ...)."""
    return sqs.Queue(
        scope,
        construct_id,
        queue_name=None if config.is_production else name,
        removal_policy=stateful_removal(config),
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        **props,
    )


def stateful_removal(config: StageConfig) -> RemovalPolicy:
    """What deleting the stack does to a queue or table: kept in production, removed elsewhere."""
    return RemovalPolicy.RETAIN if config.is_production else RemovalPolicy.DESTROY
