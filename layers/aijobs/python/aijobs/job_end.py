"""The end of a job's life, one home: what follows every final transition of any job.

Every place that finishes a job calls `job_ended` (consumer, DLQ consumer, sweeper, operator,
cancel): it queues the job's webhook delivery (aijobs.webhooks), and only for a workflow's child
asks the workflow code (aijobs.workflows.fanin) to try its parent's merge step. The child's count
on the parent was already added in the child's own final transaction; the merge step is the
conditional step after it, which exactly one caller wins. If a caller dies between the two, the
parent's hold expires and the sweeper's re-check does the same step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aijobs.webhooks.messages import queue_callback

if TYPE_CHECKING:
    from datetime import datetime

    from aijobs.domain import Job
    from aijobs.queues import JobQueues
    from aijobs.store.jobs import JobStore


def job_ended(store: JobStore, queues: JobQueues, job: Job, now: datetime) -> bool:
    """What follows every final transition of `job` (the row as that transition returned it):
    its webhook delivery (aijobs.webhooks), then its parent's merge step; True if this call
    moved the parent."""
    queue_callback(queues, job)
    if job.parent_id is None:
        return False
    from aijobs.workflows.fanin import try_merge  # a workflow's child only

    return try_merge(store, queues, job.user_id, job.parent_id, now)
