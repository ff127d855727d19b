"""After a final transition: queue the job's webhook, and move a parent to its merge step when
this was its last child.

Every place that finishes a job calls `after_final` (consumer, DLQ consumer, sweeper, operator,
cancel). The child's count on the parent was already added in the child's own final transaction;
this is the conditional step after it, which exactly one caller wins. If a caller dies between
the two, the parent's hold expires and the sweeper's re-check does the same step.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from aijobs.domain import Job, QueueMessage
from aijobs.observability import logger
from aijobs.queues import JobQueues
from aijobs.store.jobs import JobStore
from aijobs.webhooks.messages import queue_callback

# How long a parent moved to its merge step waits for the merge message before the sweeper
# re-sends it (the message was lost with the process that won the step).
MERGE_HOLD = timedelta(minutes=5)


def after_final(store: JobStore, queues: JobQueues, job: Job, now: datetime) -> bool:
    """What follows every final transition of `job` (the row as that transition returned it):
    its webhook delivery (aijobs.webhooks), then its parent's merge step; True if this call
    moved the parent."""
    queue_callback(queues, job)
    return notify_parent(store, queues, job, now)


def notify_parent(store: JobStore, queues: JobQueues, child: Job, now: datetime) -> bool:
    """If `child` belongs to a parent, try the parent's merge step; True if this call moved it."""
    if child.parent_id is None:
        return False
    return try_merge(store, queues, child.user_id, child.parent_id, now)


def try_merge(store: JobStore, queues: JobQueues, user_id: str, parent_id: str, now: datetime) -> bool:
    parent = store.parent_ready(user_id, parent_id, now=now, hold=MERGE_HOLD)
    if parent is None:
        return False
    queues.send(
        QueueMessage(jobId=parent.job_id, userId=user_id, kind=parent.kind, check=parent.recheck_id),
        kind=parent.kind,
    )
    logger.info(
        "workflow children done: merge step queued",
        extra={
            "parentId": parent_id,
            "succeeded": parent.children_succeeded,
            "failedFinal": parent.children_failed,
        },
    )
    return True
