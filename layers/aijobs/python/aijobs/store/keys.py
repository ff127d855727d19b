"""The key schema of both tables, shared by the store modules and the CDK tables construct.

Access patterns are documented in cdk/aijobs_cdk/constructs/TABLES.md.
"""

from __future__ import annotations

from datetime import UTC, datetime

PK, SK = "pk", "sk"
TTL_ATTRIBUTE = "ttl"

# Index name -> (partition key attribute, sort key attribute).
SHARD_INDEXES = {
    # A user's jobs of one status, newest first.
    "by_user_status": ("gsi1pk", "gsi1sk"),
    # Jobs of one kind and status ordered by last change: re-runs, sweeper, retention clean-up.
    "by_kind_status": ("gsi2pk", "gsi2sk"),
    # Items that fall due at a time (credit grants to expire, transactions past retention).
    "by_due": ("gsi3pk", "gsi3sk"),
}
META_INDEXES = {
    # Dead letters of a kind, newest first.
    "by_time": ("gsi1pk", "gsi1sk"),
}


def iso(moment: datetime) -> str:
    """Fixed-width UTC timestamps, so string order is time order in keys and conditions."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def user_pk(user_id: str) -> str:
    return f"USER#{user_id}"


# A workflow child's id is its parent's id, a dot and its zero-padded index: derived, so a
# replayed split writes the same rows again instead of new ones, and children sort by index.
CHILD_INDEX_DIGITS = 5
MAX_CHILDREN = 10_000


def child_job_id(parent_id: str, index: int) -> str:
    return f"{parent_id}.{index:0{CHILD_INDEX_DIGITS}d}"


def is_child_id(job_id: str) -> bool:
    return "." in job_id


def job_sk(job_id: str) -> str:
    """`JOB#<id>`; a workflow child lives under `CHILD#<parentId>.<index>`, next to its siblings and
    outside the owner's job list (which reads `JOB#` only)."""
    return f"CHILD#{job_id}" if is_child_id(job_id) else f"JOB#{job_id}"


def children_sk_prefix(parent_id: str) -> str:
    return f"CHILD#{parent_id}."


def user_status_pk(user_id: str, status: str) -> str:
    return f"USER#{user_id}#STATUS#{status}"


def parent_status_pk(user_id: str, parent_id: str, status: str) -> str:
    """The `by_user_status` partition of a parent's children of one status (re-run failed children)."""
    return f"USER#{user_id}#PARENT#{parent_id}#STATUS#{status}"


def kind_status_pk(kind: str, status: str) -> str:
    return f"KIND#{kind}#STATUS#{status}"


def idempotency_sk(key: str) -> str:
    return f"IDEMPOTENCY#{key}"


def api_key_pk(key_hash: str) -> str:
    return f"APIKEY#{key_hash}"


PROFILE_SK = "PROFILE"
API_KEY_SK = "APIKEY"
SHARD_PK = "SHARD"
CONFIG_PK = "CONFIG"


CRON_RUN_PREFIX = "CRONRUN#"


def cron_run_pk(expression: str) -> str:
    return f"{CRON_RUN_PREFIX}{expression}"


def dead_letter_pk(kind: str) -> str:
    return f"DEADLETTER#{kind}"


# A tenant's webhook signing secret (aijobs.webhooks.secrets): its own partition, so the producer's
# write grant can be limited to these items by a leading-key condition.
WEBHOOK_SECRET_PREFIX = "WEBHOOK#"  # noqa: S105 - a key prefix, not a secret
WEBHOOK_SECRET_SK = "SECRET"  # noqa: S105 - a sort key


def webhook_secret_pk(user_id: str) -> str:
    return f"{WEBHOOK_SECRET_PREFIX}{user_id}"


FLOW_PREFIX = "FLOW#"


def flow_pk(kind: str) -> str:
    """A kind's adaptive-concurrency partition: per-minute throttle counters and the controller's state."""
    return f"{FLOW_PREFIX}{kind}"
