"""What the soak reads back from a stage: a job's row, a workflow child's row, a dead-letter entry as
an operator sees it, and a user's ledger."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class RowState:
    status: str
    attempts: int
    dead_lettered: bool
    #: The model spend recorded on the row (USD), when the target can read it.
    cost: float | None = None
    last_error_class: str | None = None
    usage_recorded: bool = False
    price: int | None = None
    charge_waived: bool = False
    #: Seconds from the row's creation to its attempt's start, when it was tried once (its wait in
    #: the queue: the backlog a message met), else None.
    first_wait: float | None = None


@dataclass(frozen=True)
class ChildState:
    job_id: str
    status: str
    cost: float | None
    usage_recorded: bool


@dataclass(frozen=True)
class DeadLetterState:
    """A dead-letter entry as an operator sees it: what became of it, and whether the default
    (open) list and count include it."""

    resolution: str
    listed_open: bool


@dataclass
class LedgerView:
    balance: int
    api_balance: int | None
    # type -> total, including transactions folded into the account by retention
    totals: dict[str, int]
    expired_since: int
    per_job: dict[str, Counter[str]]
    refund_amounts: dict[str, int]
    short_grants_unexpired: int
    debit_amounts: dict[str, int] = field(default_factory=dict)
