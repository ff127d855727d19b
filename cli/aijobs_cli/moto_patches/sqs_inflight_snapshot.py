"""SQS reads a queue's in-flight message groups from a snapshot, so a receive on another thread
cannot break it.

What moto does wrong (moto.sqs.models.Queue.pending_message_groups): not a slow path but a race.
The property builds a set from the queue's in-flight messages by iterating the live set, while the
server's other threads receive and delete messages of the same queue: under load ReceiveMessage
failed with "RuntimeError: Set changed size during iteration" (seen in the 10,000-job soak), a 500
to the poller. The patch iterates a snapshot (tuple() copies the set in one step the interpreter
lock does not interrupt). The same groups as moto's. Remove when moto locks its SQS queues.

Written for moto MOTO_VERSION (5.2.5). Upstream: not reported upstream (see
docs/reference/moto-patches.md for the issue we would file).
"""

from __future__ import annotations

import importlib
from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "not reported upstream"


def _pending_groups(queue: Any) -> set[str]:
    return {message.group_id for message in tuple(queue._pending_messages) if message.group_id is not None}


def install(originals: dict[str, Any]) -> None:
    """Record moto's Queue.pending_message_groups in `originals`, then replace it."""
    sqs_models: Any = importlib.import_module("moto.sqs.models")
    originals.setdefault("Queue.pending_message_groups", sqs_models.Queue.__dict__["pending_message_groups"])
    sqs_models.Queue.pending_message_groups = property(_pending_groups)
