"""The bounds of every value an operator sets while a stage runs (docs/configuration.md, "Bounds
of what operators set").

One table for the retention, a tenant's running cap, the daily spend caps and credit grants: the
CLI checks its options against it, the writers (aijobs.store, aijobs.store.credits) refuse a value
outside it themselves, so a direct call refuses too, and the readers treat a stored value outside
it as invalid. What a reader does then is its own decision: the */10 run fails loudly (as for a
missing retention); a user's request or job goes on with the documented fallback and an error log.
The keys of `.env.<stage>` have their bounds in aijobs_cdk.stage_config (the running cap and the spend
cap there take theirs from here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from aijobs.errors import AijobsError

#: The one message every reader logs (at ERROR) for a stored value outside its bounds.
INVALID_STORED = "stored configuration is invalid"


# What a command line or a string attribute may hold: plain digits (no exponent, no sign but minus).
_PLAIN = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


class BoundError(AijobsError, ValueError):
    """A value outside its bounds (or not a number of the right kind); the message says which."""


@dataclass(frozen=True)
class Bound:
    """An inclusive range, its unit, and how many decimal places a value may have (0: whole)."""

    what: str
    low: Decimal
    high: Decimal
    unit: str
    places: int = 0

    def check(self, value: object) -> Decimal:
        """The value as an exact Decimal; BoundError naming the bounds when it is not a number
        of this kind within them. Accepts what DynamoDB and a command line give: int, Decimal,
        a string of plain digits (never a bool or a float, whose binary noise is not an amount)."""
        if isinstance(value, str) and _PLAIN.fullmatch(value.strip()):
            number = Decimal(value.strip())
        elif isinstance(value, (int, Decimal)) and not isinstance(value, bool):
            # An int goes in whole: str() of one above 4,300 digits raises (CPython's limit).
            number = Decimal(value)
        else:
            raise BoundError(f"{self.what} {_shown(value)} is not a plain number; {self.describe()}")
        if not number.is_finite() or not self.low <= number <= self.high:
            raise BoundError(f"{self.what} {_shown(value)} is out of bounds; {self.describe()}")
        if number != number.quantize(Decimal(1).scaleb(-self.places)):
            raise BoundError(f"{self.what} {_shown(value)} has too many decimals; {self.describe()}")
        # Plain digits for a whole amount (a stored 1E+3 reads as 1000, -0 as 0).
        return Decimal(int(number)) if number == number.to_integral_value() else number

    def whole(self, value: object) -> int:
        """`check` for a whole-number bound, as an int."""
        return int(self.check(value))

    def describe(self) -> str:
        kind = "a whole number" if self.places == 0 else f"an amount with at most {self.places} decimals"
        return f"it must be {kind} from {self.low} to {self.high} {self.unit}"


def stored(bound: Bound, raw: object, *, where: str, fallback: str) -> Decimal | None:
    """A value read back from a table: None when absent, and None too when it was written around
    the writers (outside its bounds, not a number), after an error log naming it and what is used
    instead, so a user's request or job goes on with the caller's fallback."""
    if raw is None:
        return None
    try:
        return bound.check(raw)
    except BoundError as error:
        # Imported here: the stage config (cdk synth) uses this table and needs no logger.
        from aijobs.observability import logger

        logger.error(INVALID_STORED, extra={"config": where, "fallback": fallback, "error": str(error)})
        return None


def _shown(value: object) -> str:
    """The value for a message, cut short (a stored value can be any length)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"({len(Decimal(value).as_tuple().digits)} digits)"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


# Ten years: DynamoDB TTLs and datetimes stay far from their limits (year 9999 ended the
# 3,000,000-day retention of issue 25 in an OverflowError on every submit).
CREDIT_TX_RETENTION_DAYS = Bound("credit-transaction retention", Decimal(1), Decimal(3650), "days")
AI_TASK_RETENTION_DAYS = Bound("AI-task retention", Decimal(1), Decimal(3650), "days")
# Jobs of one tenant running at once, per kind (0: no cap); also TENANT_MAX_RUNNING's bounds.
TENANT_MAX_RUNNING = Bound("running cap", Decimal(0), Decimal(10_000), "jobs per kind")
# A daily model-spend cap, the stage's (for a day, and SPEND_DAILY_CAP_USD) or a tenant's own.
SPEND_CAP_USD = Bound("spend cap", Decimal(0), Decimal("999999999.999999"), "USD", places=6)
CREDIT_GRANT = Bound("credit grant", Decimal(1), Decimal(1_000_000_000), "credits")
CREDIT_GRANT_DAYS = Bound("credit grant's lifetime", Decimal(1), Decimal(3650), "days")

#: Every bound, by the command-line option that sets it (docs/configuration.md's table lists the same).
BOUNDS: dict[str, Bound] = {
    "config retention --credit-tx-days": CREDIT_TX_RETENTION_DAYS,
    "config retention --ai-task-days": AI_TASK_RETENTION_DAYS,
    "tenants limit --max-running": TENANT_MAX_RUNNING,
    "spend cap --usd": SPEND_CAP_USD,
    "credits grant AMOUNT": CREDIT_GRANT,
    "credits grant --days": CREDIT_GRANT_DAYS,
}
