"""A job row as DynamoDB holds it: the `Job` <-> item mapping with the row's index keys, the
address a queue message carries (`JobKey`), and the values the row's charge and workflow phase take.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from aijobs.domain import Job, JobStatus
from aijobs.store.keys import (
    PK,
    SK,
    IndexBuckets,
    is_child_id,
    iso,
    job_sk,
    kind_status_pk,
    parent_status_pk,
    parse_iso,
    user_pk,
    user_status_pk,
)

# Where a job's reservation stands (`charge_state`); a workflow parent's step (`phase`).
CHARGE_RESERVED, CHARGE_SETTLED, CHARGE_REFUNDED = "reserved", "settled", "refunded"
PHASE_SPLIT, PHASE_CHILDREN, PHASE_MERGE = "split", "children", "merge"


@dataclass(frozen=True)
class JobKey:
    """What a queue message tells of a row: enough to address it and keep its index keys right."""

    user_id: str
    job_id: str
    kind: str

    @property
    def parent_id(self) -> str | None:
        """A child's parent, from its id (`<parent>.<part>`); None for any other job."""
        return self.job_id.rsplit(".", 1)[0] if is_child_id(self.job_id) else None


_DESERIALIZER = TypeDeserializer()


def deserialize_item(item: dict[str, Any]) -> dict[str, Any]:
    """A low-level item (an error's `Item`, which the resource layer leaves as sent) as Python."""
    return {name: _DESERIALIZER.deserialize(value) for name, value in item.items()}


def gsi1pk(job: Job | JobKey, status: JobStatus) -> str:
    """A job's `by_user_status` partition: the owner's, or for a child its parent's children."""
    if job.parent_id is not None:
        return parent_status_pk(job.user_id, job.parent_id, status.value)
    return user_status_pk(job.user_id, status.value)


def job_to_item(job: Job, buckets: IndexBuckets) -> dict[str, Any]:
    """A new job row with its index keys. JSON-ish fields are stored as strings (no Decimal trouble)."""
    item: dict[str, Any] = {
        PK: user_pk(job.user_id),
        SK: job_sk(job.job_id),
        "gsi1pk": gsi1pk(job, job.status),
        "gsi1sk": job_sk(job.job_id),
        "gsi2pk": buckets.partition(kind_status_pk(job.kind, job.status.value), job.job_id),
        "gsi2sk": f"{iso(job.updated_at)}#{job.job_id}",
        "jobId": job.job_id,
        "userId": job.user_id,
        "kind": job.kind,
        "status": job.status.value,
        "provider": job.provider,
        "attempts": job.attempts,
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
        "awaiting_provider": False,
    }
    if job.options:
        item["options_json"] = json.dumps(job.options)
    if job.input is not None:
        # UTF-8 as sent (DynamoDB counts a string's UTF-8 bytes): \uXXXX escapes would make a
        # non-ASCII input up to three times its size, past what the API's inline limit measured.
        item["input_json"] = json.dumps(job.input, separators=(",", ":"), ensure_ascii=False)
    if job.input_ref is not None:
        item["inputRef"] = job.input_ref
    if job.model is not None:
        item["model"] = job.model
    # A row born `running` under its writer's own claim (a synchronous call, aijobs.api.service).
    if job.claim_id is not None:
        item["claim_id"] = job.claim_id
    if job.started_at is not None:
        item["started_at"] = iso(job.started_at)
    if job.lease_expires_at is not None:
        item["lease_expires_at"] = iso(job.lease_expires_at)
    if job.cost is not None:
        item["cost"] = str(job.cost)
    if job.price:
        item["price"] = job.price
        item["charge_state"] = job.charge_state or CHARGE_RESERVED
        item["charge_json"] = json.dumps(job.charge_allocation, sort_keys=True)
    if job.parent_id is not None:
        item["parentId"] = job.parent_id
        item["part"] = job.part
    if job.callback_url is not None:
        item["callbackUrl"] = job.callback_url
    if job.phase is not None:
        item |= {
            "phase": job.phase,
            "children_split": 0,
            "children_done": 0,
            "children_succeeded": 0,
            "children_failed": 0,
            "base_price": job.base_price,
            "child_price": job.child_price,
        }
    return item


def job_from_item(item: dict[str, Any]) -> Job:
    def moment(name: str) -> datetime | None:
        return parse_iso(str(item[name])) if item.get(name) else None

    return Job(
        job_id=str(item["jobId"]),
        user_id=str(item["userId"]),
        kind=str(item["kind"]),
        status=JobStatus(str(item["status"])),
        input=json.loads(item["input_json"]) if "input_json" in item else None,
        input_ref=item.get("inputRef"),
        options=json.loads(item.get("options_json", "{}")),
        model=item.get("model"),
        provider=str(item["provider"]),
        attempts=int(item.get("attempts", 0)),
        last_error_class=item.get("last_error_class"),
        last_error_message=item.get("last_error_message"),
        created_at=parse_iso(str(item["created_at"])),
        updated_at=parse_iso(str(item["updated_at"])),
        started_at=moment("started_at"),
        finished_at=moment("finished_at"),
        lease_expires_at=moment("lease_expires_at"),
        awaiting_provider=bool(item.get("awaiting_provider", False)),
        provider_checks=int(item.get("provider_checks", 0)),
        provider_handle=item.get("provider_handle"),
        provider_tasks=int(item.get("provider_tasks", 0)),
        recheck_id=item.get("recheck_id"),
        next_attempt_at=moment("next_attempt_at"),
        held_until=moment("held_until"),
        claim_id=item.get("claim_id"),
        cancel_requested_at=moment("cancel_requested_at"),
        result=json.loads(item["result_json"]) if "result_json" in item else None,
        result_ref=item.get("result_ref"),
        usage=json.loads(item.get("usage_json", "{}")),
        cost=float(item["cost"]) if "cost" in item else None,
        dead_lettered=bool(item.get("dead_lettered", False)),
        reruns=int(item.get("reruns", 0)),
        previous_error_class=item.get("previous_error_class"),
        price=int(item.get("price", 0)),
        charge_waived=bool(item.get("charge_waived", False)),
        charge_state=item.get("charge_state"),
        charge_allocation=json.loads(item.get("charge_json", "{}")),
        parent_id=item.get("parentId"),
        part=int(item["part"]) if "part" in item else None,
        phase=item.get("phase"),
        children_total=int(item["children_total"]) if "children_total" in item else None,
        children_split=int(item.get("children_split", 0)),
        children_done=int(item.get("children_done", 0)),
        children_succeeded=int(item.get("children_succeeded", 0)),
        children_failed=int(item.get("children_failed", 0)),
        failures_allowed=int(item.get("failures_allowed", 0)),
        base_price=int(item.get("base_price", 0)),
        child_price=int(item.get("child_price", 0)),
        callback_url=item.get("callbackUrl"),
        callback_state=item.get("callback_state"),
        callback_attempts=int(item.get("callback_attempts", 0)),
        callback_status=int(item["callback_status"]) if "callback_status" in item else None,
        callback_error=item.get("callback_error"),
        callback_at=moment("callback_at"),
        attempt_log=[_log_entry(entry) for entry in item.get("attempt_log", [])],
    )


def _log_entry(entry: Any) -> dict[str, Any]:
    """An attempt log entry as stored (DynamoDB numbers are Decimals) back to plain values."""
    return {name: int(value) if name in ("n", "t", "d") else value for name, value in entry.items()}
