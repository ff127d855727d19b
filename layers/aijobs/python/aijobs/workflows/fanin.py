"""Move a parent to its merge step when its last child finished.

Every final transition of a job ends in aijobs.job_end.job_ended, which calls `try_merge` for a
workflow's child. The child's count on the parent was already added in the child's own final
transaction; this is the conditional step after it, which exactly one caller wins. If a caller
dies between the two, the parent's hold expires and the sweeper's re-check does the same step.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from aijobs.domain import QueueMessage
from aijobs.observability import logger
from aijobs.queues import JobQueues
from aijobs.store.jobs import JobStore

# How long a parent moved to its merge step waits for the merge message before the sweeper
# re-sends it (the message was lost with the process that won the step).
MERGE_HOLD = timedelta(minutes=5)


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
