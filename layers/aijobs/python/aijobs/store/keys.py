"""The key schema of both tables, shared by the store modules and the CDK tables construct.

Access patterns are documented in cdk/aijobs_cdk/constructs/TABLES.md.
"""

from __future__ import annotations

import heapq
import itertools
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

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
    """The unsuffixed `by_kind_status` partition: rows written before write sharding; new rows
    carry `IndexBuckets.partition(kind_status_pk(...), job_id)`."""
    return f"KIND#{kind}#STATUS#{status}"


# --- write sharding of the index partitions every tenant shares ---------------------------------

DEFAULT_INDEX_BUCKETS = 8
MAX_INDEX_BUCKETS = 64


@dataclass(frozen=True)
class IndexBuckets:
    """How many buckets the shared index partitions (`KIND#..#STATUS#..`, `GRANT`, `TX`) are split
    into: writers put an item in bucket `crc32(id) % write`; readers query buckets `0..read-1` and
    the unsuffixed legacy partition, so rows written under an earlier count (or none) stay visible.

    `read` (0: same as `write`) is kept at the highest count any row may still carry while the
    bucket count of a live stage is lowered (docs/operations/scale.md).
    """

    write: int = DEFAULT_INDEX_BUCKETS
    read: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.write <= MAX_INDEX_BUCKETS:
            raise ValueError(f"INDEX_BUCKETS={self.write} is outside 1-{MAX_INDEX_BUCKETS}")
        if self.read and not self.write <= self.read <= MAX_INDEX_BUCKETS:
            raise ValueError(
                f"INDEX_BUCKETS_READ={self.read} must lie between INDEX_BUCKETS={self.write} and "
                f"{MAX_INDEX_BUCKETS}: readers must cover every bucket a writer uses"
            )

    @property
    def read_count(self) -> int:
        return self.read or self.write

    def bucket(self, item_id: str) -> int:
        """A stable bucket of an id (crc32: the same in every process, unlike `hash()`)."""
        return zlib.crc32(item_id.encode()) % self.write

    def partition(self, base: str, item_id: str) -> str:
        """The suffixed partition an item with this id is written to: `<base>#<bucket>`."""
        return f"{base}#{self.bucket(item_id)}"

    def partitions(self, base: str) -> tuple[str, ...]:
        """Every partition a reader of `base` must query: the legacy one, then each bucket."""
        return (base, *(f"{base}#{index}" for index in range(self.read_count)))


def query_buckets(
    table: Table,
    partitions: Iterable[str],
    *,
    sort_key: str,
    limit: int | None,
    query: dict[str, Any],
) -> list[dict[str, Any]]:
    """The items of several index partitions as one ordered result: what a query of a single
    partition would return, in sort-key order (descending when the query says
    `ScanIndexForward=False`), at most `limit` of them.

    `query` is the Query request with `:pk` standing for the partition in its key condition. Each
    partition is read in order up to `limit` (paging on), then the sorted lists are merged and cut.
    """
    if limit is not None and limit <= 0:
        return []
    values = query["ExpressionAttributeValues"]
    per_partition = [
        _query_partition(table, {**query, "ExpressionAttributeValues": {**values, ":pk": pk}}, limit)
        for pk in partitions
    ]
    merged: Iterator[dict[str, Any]] = heapq.merge(
        *per_partition,
        key=lambda item: str(item[sort_key]),
        reverse=query.get("ScanIndexForward") is False,
    )
    return list(itertools.islice(merged, limit))


def _query_partition(table: Table, query: dict[str, Any], limit: int | None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        if limit is not None:
            query["Limit"] = limit - len(items)
        response = table.query(**query)
        items.extend(response["Items"])
        if "LastEvaluatedKey" not in response or (limit is not None and len(items) >= limit):
            return items
        query["ExclusiveStartKey"] = response["LastEvaluatedKey"]


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


# A kind's dead-letter list (aijobs.store.dead_letter_records): its own partition, so the API's
# write grant (an operator settling entries) can be limited to these items by a leading-key condition.
DEAD_LETTER_PREFIX = "DEADLETTER#"


def dead_letter_pk(kind: str) -> str:
    return f"{DEAD_LETTER_PREFIX}{kind}"


def dead_letter_list_pk(kind: str, part: str) -> str:
    """The `by_time` partition of a kind's dead letters in one part of the list (aijobs.store.
    dead_letter_records): `open` is the partition the DLQ consumer has always written."""
    return dead_letter_pk(kind) if part == "open" else f"{dead_letter_pk(kind)}#{part.upper()}"


# A tenant's webhook signing secret (aijobs.webhooks.secrets): its own partition, so the producer's
# write grant can be limited to these items by a leading-key condition.
WEBHOOK_SECRET_PREFIX = "WEBHOOK#"  # noqa: S105 - a key prefix, not a secret
WEBHOOK_SECRET_SK = "SECRET"  # noqa: S105 - a sort key


def webhook_secret_pk(user_id: str) -> str:
    return f"{WEBHOOK_SECRET_PREFIX}{user_id}"


FLOW_PREFIX = "FLOW#"


def concurrency_pk(kind: str) -> str:
    """A kind's adaptive-concurrency partition: per-minute throttle counters and the controller's state."""
    return f"{FLOW_PREFIX}{kind}"


# A model's alert markers (aijobs.store.model_alerts): its own partition, so the consumers' and the
# cron's write grant can be limited to these items by a leading-key condition.
MODEL_PREFIX = "MODEL#"


def model_pk(model: str) -> str:
    return f"{MODEL_PREFIX}{model}"
