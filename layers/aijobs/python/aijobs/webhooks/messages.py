"""The webhook delivery message (ids only) and the one call every final transition makes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from aijobs.domain import Job, JobStatus
from aijobs.observability import logger
from aijobs.queues import JobQueues

# The row's `callback_state`: set to PENDING by the final transition itself (same write), so a
# delivery message lost between that commit and its send is found again (see `lost_callbacks`).
PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
EVENT_TYPES = {JobStatus.SUCCEEDED: "job.succeeded", JobStatus.FAILED_FINAL: "job.failed"}


class CallbackMessage(BaseModel):
    """The whole delivery message: which job and which of its outcomes. Never a URL or a secret."""

    # Built on first use (`defer_build`): only jobs with a callbackUrl send one.
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    jobId: str = Field(min_length=1, max_length=64)
    userId: str = Field(min_length=1, max_length=128)
    deliveryId: str = Field(min_length=1, max_length=120)


def delivery_id(job: Job) -> str:
    """Stable per job and final outcome: every copy of one outcome's delivery carries the same id
    (a receiver dedupes on it); an operator re-run that ends again is a new outcome."""
    suffix = f".r{job.reruns}" if job.reruns else ""
    return f"{job.job_id}.{job.status.value}{suffix}"


def queue_callback(queues: JobQueues, job: Job) -> bool:
    """After a final transition: queue the job's webhook delivery, if it has a callback pending.

    A failure to send is logged, never raised: the job's outcome is committed already, and the
    sweeper re-sends a pending delivery that never went out."""
    if job.callback_url is None or job.callback_state != PENDING or not job.status.is_terminal:
        return False
    message = CallbackMessage(jobId=job.job_id, userId=job.user_id, deliveryId=delivery_id(job))
    try:
        sent = queues.send_webhook(message.model_dump_json())
    except Exception:
        logger.exception("webhook delivery could not be queued (the sweeper re-sends it)")
        return False
    if not sent:
        logger.warning("no webhook queue configured here: the sweeper sends this delivery")
    return sent
