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

from aws_cdk import RemovalPolicy

from aijobs.stage_config import StageConfig


def queue_name(config: StageConfig, name: str) -> str | None:
    """`name` outside production; None (CloudFormation generates one) in production."""
    return None if config.is_production else name


def stateful_removal(config: StageConfig) -> RemovalPolicy:
    """What deleting the stack does to a queue or table: kept in production, removed elsewhere."""
    return RemovalPolicy.RETAIN if config.is_production else RemovalPolicy.DESTROY
