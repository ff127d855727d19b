"""How long finished jobs and credit transactions are kept: the meta table's dynamic configuration
(`CONFIG` / `retention`, set with `aijobs config retention`).

The `*/10` maintenance run reads it once per run and fails loudly when it is missing or invalid
(docs/design.md §7): outside its bounds (aijobs.bounds) counts as invalid. The functions that finish jobs
and move credits read it too, cached per container for `RETENTION_CACHE_SECONDS`, to stamp each
finished job row and each credit transaction with its DynamoDB TTL (`ttl`): DynamoDB then removes
the row itself, free and at any rate, typically within two days of the time. The maintenance run's
clean-up stays as the backstop for rows without one, which is also what a user's request falls back
to when the item is invalid: no TTL, and an error log, never a failed request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from aijobs.bounds import AI_TASK_RETENTION_DAYS, CREDIT_TX_RETENTION_DAYS, INVALID_STORED, BoundError
from aijobs.errors import AijobsError
from aijobs.observability import logger
from aijobs.store.keys import CONFIG_PK, PK, SK

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

RETENTION_SK = "retention"
#: How long a container trusts the retention it read: a change reaches every job finishing after it
#: within this time (rows already finished keep the TTL they got).
RETENTION_CACHE_SECONDS = 300


class RetentionConfigError(AijobsError):
    """The meta table's retention configuration is missing or invalid."""


@dataclass(frozen=True)
class Retention:
    credit_transaction_days: int
    ai_task_days: int


#: The item's key in the meta table.
RETENTION_KEY = {PK: CONFIG_PK, SK: RETENTION_SK}
#: Its attributes and their bounds (aijobs.bounds).
_FIELDS = {
    "credit_tx_retention_days": CREDIT_TX_RETENTION_DAYS,
    "ai_task_retention_days": AI_TASK_RETENTION_DAYS,
}


def read_retention(meta: Table) -> Retention:
    return parse_retention(meta.get_item(Key=RETENTION_KEY, ConsistentRead=True).get("Item"))


def parse_retention(item: Mapping[str, Any] | None) -> Retention:
    """The retention an item holds; `RetentionConfigError` saying what to fix if it is missing or
    invalid."""
    if item is None:
        raise RetentionConfigError(
            f"meta table has no {CONFIG_PK}/{RETENTION_SK} item; set it with `aijobs config retention`"
        )
    values = {}
    for name, bound in _FIELDS.items():
        try:
            values[name] = bound.whole(item.get(name))
        except BoundError as error:
            raise RetentionConfigError(
                f"{name} in {CONFIG_PK}/{RETENTION_SK}: {error}; set it with `aijobs config retention`"
            ) from None
    return Retention(values["credit_tx_retention_days"], values["ai_task_retention_days"])


def write_retention(meta: Table, *, credit_tx_retention_days: int, ai_task_retention_days: int) -> None:
    """Set the dynamic retention configuration (operators; the local stack seeds it). BoundError
    (a ValueError) for a value outside aijobs.bounds, and nothing is written."""
    credit_tx_retention_days = CREDIT_TX_RETENTION_DAYS.whole(credit_tx_retention_days)
    ai_task_retention_days = AI_TASK_RETENTION_DAYS.whole(ai_task_retention_days)
    meta.put_item(
        Item={
            PK: CONFIG_PK,
            SK: RETENTION_SK,
            "credit_tx_retention_days": credit_tx_retention_days,
            "ai_task_retention_days": ai_task_retention_days,
        }
    )


class RetentionReader:
    """The retention as a container sees it: read on first use, then trusted for
    RETENTION_CACHE_SECONDS. Missing or invalid configuration gives None (no TTL: the row waits for
    the maintenance run, which reports the configuration loudly) rather than failing a job; an
    invalid item is logged as an error each time it is read.

    A lookup the container makes anyway may bring the item along while it is `due()` and hand it to
    `accept()` (the Directory's first tenant lookups do: one request instead of two)."""

    def __init__(self, meta: Table, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._meta = meta
        self._monotonic = monotonic
        self._cached: tuple[Retention | None, float] | None = None

    def due(self) -> bool:
        """The next use would read the item."""
        return self._cached is None or self._monotonic() >= self._cached[1]

    def accept(self, item: Mapping[str, Any] | None) -> Retention | None:
        """Trust the item, read by someone else just now, for RETENTION_CACHE_SECONDS."""
        try:
            retention: Retention | None = parse_retention(item)
        except RetentionConfigError as error:
            retention = None
            if item is not None:  # missing is the state before `aijobs config retention`
                logger.error(
                    INVALID_STORED,
                    extra={
                        "config": f"{CONFIG_PK}/{RETENTION_SK}",
                        "fallback": "no TTL",
                        "error": str(error),
                    },
                )
        self._cached = (retention, self._monotonic() + RETENTION_CACHE_SECONDS)
        return retention

    def __call__(self) -> Retention | None:
        if self._cached is not None and self._monotonic() < self._cached[1]:
            return self._cached[0]
        return self.accept(self._meta.get_item(Key=RETENTION_KEY, ConsistentRead=True).get("Item"))

    def tasks(self) -> timedelta | None:
        """How long a finished job is kept."""
        retention = self()
        return None if retention is None else timedelta(days=retention.ai_task_days)

    def transactions(self) -> timedelta | None:
        """How long a credit transaction is kept."""
        retention = self()
        return None if retention is None else timedelta(days=retention.credit_transaction_days)
