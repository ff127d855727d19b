"""Adaptive concurrency in the meta table: per-kind, per-minute throttle counters and the controller's state.

One partition per kind, `FLOW#<kind>` (the prefix predates the module's name and stays, so counters
and state written by earlier versions are still read): the consumers add to
`MINUTE#<yyyy-mm-ddThh:mm>` items (one `UpdateItem ADD` per flush, TTL two hours), the cron keeps
`STATE` (current value, last changes, reason, a short history, a version). `STATE` sorts after
every `MINUTE#`, so one Query from the oldest minute a run needs returns the counters and the
state together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.aimd import MinuteCount, Step
from aijobs.store.keys import PK, SK, TTL_ATTRIBUTE, concurrency_pk, iso, parse_iso

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

MINUTE_PREFIX = "MINUTE#"
STATE_SK = "STATE"
# Counters outlive the longest lookback a run may use (THROTTLE_WINDOW_MINUTES, CONCURRENCY_QUIET_SECONDS).
COUNTER_MEMORY = timedelta(hours=2)
HISTORY_LENGTH = 10


def minute_sk(moment: datetime) -> str:
    return MINUTE_PREFIX + iso(moment)[:16]


def _minute(sk: str) -> datetime:
    return parse_iso(sk[len(MINUTE_PREFIX) :] + ":00.000000Z")


@dataclass(frozen=True)
class FlowState:
    """The controller's record of one kind (version 0: never written)."""

    value: int | None = None
    reason: str = ""
    changed_at: datetime | None = None
    narrowed_at: datetime | None = None
    widened_at: datetime | None = None
    version: int = 0
    history: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "maxConcurrency": self.value,
            "reason": self.reason,
            "changedAt": iso(self.changed_at) if self.changed_at else None,
            "version": self.version,
            "history": list(self.history),
        }


def _when(item: dict[str, Any], name: str) -> datetime | None:
    text = item.get(name)
    return parse_iso(str(text)) if text else None


def _state(item: dict[str, Any] | None) -> FlowState:
    if item is None:
        return FlowState()
    value = item.get("value")
    return FlowState(
        value=int(value) if value is not None else None,
        reason=str(item.get("reason", "")),
        changed_at=_when(item, "changed_at"),
        narrowed_at=_when(item, "narrowed_at"),
        widened_at=_when(item, "widened_at"),
        version=int(item.get("version", 0)),
        history=tuple(
            {k: (int(v) if isinstance(v, Decimal) else v) for k, v in entry.items()}
            for entry in item.get("history", [])
        ),
    )


class ThrottleCounts:
    def __init__(self, meta: Table) -> None:
        self._meta = meta

    def add(self, kind: str, now: datetime, *, attempts: int, throttled: int, instance: str) -> None:
        """Add one consumer instance's counts to the kind's counter of this minute."""
        self._meta.update_item(
            Key={PK: concurrency_pk(kind), SK: minute_sk(now)},
            UpdateExpression="ADD attempts :a, throttled :t, instances :i SET #ttl = :ttl",
            ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues={
                ":a": attempts,
                ":t": throttled,
                ":i": {instance},
                ":ttl": int((now + COUNTER_MEMORY).timestamp()),
            },
        )

    def read(self, kind: str, since: datetime) -> tuple[list[MinuteCount], FlowState]:
        """The kind's counters from the minute of `since` on, and its state, in one Query."""
        counts: list[MinuteCount] = []
        state: dict[str, Any] | None = None
        query: dict[str, Any] = {
            "KeyConditionExpression": "#pk = :pk AND #sk >= :from",
            "ExpressionAttributeNames": {"#pk": PK, "#sk": SK},
            "ExpressionAttributeValues": {":pk": concurrency_pk(kind), ":from": minute_sk(since)},
        }
        while True:
            page = self._meta.query(**query)
            for item in page.get("Items", []):
                sk = str(item[SK])
                if sk == STATE_SK:
                    state = item
                elif sk.startswith(MINUTE_PREFIX):
                    counts.append(
                        MinuteCount(
                            minute=_minute(sk),
                            attempts=int(item.get("attempts", 0)),  # type: ignore[arg-type]
                            throttled=int(item.get("throttled", 0)),  # type: ignore[arg-type]
                            instances=frozenset(str(i) for i in item.get("instances", set())),  # type: ignore[union-attr]
                        )
                    )
            if "LastEvaluatedKey" not in page:
                return counts, _state(state)
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def state(self, kind: str) -> FlowState:
        item = self._meta.get_item(Key={PK: concurrency_pk(kind), SK: STATE_SK}).get("Item")
        return _state(item)

    def save(self, kind: str, read: FlowState, step: Step, now: datetime, *, observed: int | None) -> bool:
        """Record the kind's value (and `step`, when it changed it), if the state is still the
        version `read`; False when another run wrote it first (a lost race: nothing to do)."""
        item: dict[str, Any] = {
            PK: concurrency_pk(kind),
            SK: STATE_SK,
            "version": read.version + 1,
            "checked_at": iso(now),
            "reason": step.reason if step.changed else read.reason,
            "history": list(read.history),
        }
        if observed is not None:
            item["value"] = observed
        for name, moment in (
            ("changed_at", read.changed_at),
            ("narrowed_at", read.narrowed_at),
            ("widened_at", read.widened_at),
        ):
            if moment is not None:
                item[name] = iso(moment)
        if step.changed:
            item["changed_at"] = iso(now)
            item[f"{step.action}ed_at"] = iso(now)  # narrowed_at / widened_at
            entry = {
                "at": iso(now),
                "action": step.action,
                "from": observed,
                "value": step.value,
                "reason": step.reason,
            }
            item["history"] = [entry, *read.history][:HISTORY_LENGTH]
            item["value"] = step.value
        if read.version == 0:
            condition: dict[str, Any] = {
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
            }
        else:
            condition = {
                "ConditionExpression": "version = :read",
                "ExpressionAttributeValues": {":read": read.version},
            }
        try:
            self._meta.put_item(Item=item, **condition)
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True
