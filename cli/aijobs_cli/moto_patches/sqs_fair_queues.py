"""SQS fair queues, which moto does not have, emulated for the tests and the local stack.

What AWS does (SQS Developer Guide, "Amazon SQS fair queues"): on a *standard* queue, messages that
carry a `MessageGroupId` are grouped by tenant. When one tenant takes a disproportionate share of
the consumers (of the messages in flight, or of recent processing time), SQS delivers the other,
quiet tenants' messages first whenever any are waiting; the noisy tenant's messages are neither
dropped nor throttled, only delivered later. Nothing is configured on the queue: the group id on
each message is all it takes. aijobs sets it to the job's user id on every job message
(`aijobs.queues.JobQueues`), which is what bounds a quiet tenant's wait behind another's flood.

moto 5 accepts a `MessageGroupId` on a standard queue and ignores it, delivering in arrival order.
This module reorders what a standard queue's `ReceiveMessage` sees, by a deliberately simple
model of the documented behaviour: each queue remembers the groups of its last `WINDOW` deliveries;
a group with more than `NOISY_SHARE` of them is noisy; waiting messages of quiet groups come first
(in arrival order), then the noisy groups' (fewest recent deliveries first). FIFO queues and
messages without a group keep moto's order. AWS's real thresholds are approximate and also weigh
processing time; the test of per-tenant fairness depends only on "a quiet tenant's waiting message
is delivered before a noisy tenant's backlog", which is the documented guarantee.

Written for moto MOTO_VERSION (5.2.5). Upstream: getmoto/moto#9146 (closed) made moto accept a
`MessageGroupId` on a standard queue; the fair delivery order itself is not reported upstream (see
docs/reference/moto-patches.md for the issue we would file).
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "https://github.com/getmoto/moto/issues/9146"

#: Deliveries per queue the emulation remembers, and the share of them that makes a group noisy.
WINDOW = 100
NOISY_SHARE = 0.10

_RECENT = "_aijobs_recent_groups"  # on each moto Queue: the groups of its last WINDOW deliveries


def _fair_order(queue: Any, visible: list[Any]) -> list[Any]:
    recent: deque[str] | None = getattr(queue, _RECENT, None)
    if not recent or queue.fifo_queue:
        return visible
    counts = Counter(recent)
    limit = NOISY_SHARE * len(recent)

    def rank(message: Any) -> tuple[int, int]:
        group = message.group_id
        if group is None:
            return (0, 0)  # its own tenant: never noisy
        seen = counts.get(group, 0)
        return (1, seen) if seen > limit else (0, 0)

    return sorted(visible, key=rank)  # stable: arrival order within a rank


def install(originals: dict[str, Any]) -> None:
    """Record moto's Queue.messages and SQSBackend.receive_message in `originals`, then install
    the emulation."""
    from moto.sqs import models as sqs_models

    models: Any = sqs_models  # patched in place: typed loosely on purpose
    original_messages = models.Queue.messages
    original_receive = models.SQSBackend.receive_message
    originals.setdefault("Queue.messages", models.Queue.__dict__["messages"])
    originals.setdefault("SQSBackend.receive_message", original_receive)

    def messages(self: Any) -> list[Any]:
        visible: list[Any] = original_messages.fget(self)
        return _fair_order(self, visible)

    def receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        received: list[Any] = original_receive(self, queue_name, *args, **kwargs)
        queue = self.get_queue(queue_name)
        if not queue.fifo_queue:
            recent = getattr(queue, _RECENT, None)
            if recent is None:
                recent = deque(maxlen=WINDOW)
                setattr(queue, _RECENT, recent)
            recent.extend(message.group_id for message in received if message.group_id is not None)
        return received

    models.Queue.messages = property(messages)
    models.SQSBackend.receive_message = receive_message
