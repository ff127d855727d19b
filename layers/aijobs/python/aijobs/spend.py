"""The spend brake (docs/concepts/flow-control.md, "Spend brake"): a daily model-spend cap for the
stage and per tenant.

On only when the stage sets SPEND_DAILY_CAP_USD; otherwise nothing here is built and no call is
made. Days run midnight to midnight in SPEND_TIME_ZONE. Consumers read the day's brake state at
most once per STATE_REFRESH per container (one Query), so the stage may overshoot its cap by what
its consumers finish in that time; a tenant with its own cap costs one read of its counter per
job checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from aijobs.bindings import time_zone
from aijobs.store.spend import SPEND_RETENTION, DayState, SpendRecords, usd

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

# How long a container trusts the day's brake state it read.
STATE_REFRESH = timedelta(seconds=30)
# How long a held job waits before it is looked at again: a release is felt within about this
# plus STATE_REFRESH.
HOLD_SECONDS = 60


def day_of(moment: datetime, zone: tzinfo) -> str:
    return moment.astimezone(zone).date().isoformat()


def resets_at(moment: datetime, zone: tzinfo) -> datetime:
    """The next midnight in `zone` (when the day's caps start again from zero)."""
    local = moment.astimezone(zone)
    midnight = datetime.combine(local.date() + timedelta(days=1), datetime.min.time(), tzinfo=zone)
    return midnight.astimezone(UTC)


@dataclass(frozen=True)
class Verdict:
    """Why a job must wait, and whether it is the stage's brake (alert) or its tenant's."""

    reason: str
    stage: bool
    spent: Decimal
    cap: Decimal


@dataclass
class SpendBrake:
    records: SpendRecords
    cap_usd: Decimal
    zone: tzinfo
    clock: Callable[[], datetime]
    monotonic: Callable[[], float] = time.monotonic
    _state: DayState | None = field(default=None, init=False)
    _read_at: float = field(default=0.0, init=False)

    def day(self) -> str:
        return day_of(self.clock(), self.zone)

    def state(self) -> DayState:
        """Today's brake state, cached for STATE_REFRESH (and read again when the day changes)."""
        day = self.day()
        stale = self.monotonic() - self._read_at >= STATE_REFRESH.total_seconds()
        if self._state is None or self._state.day != day or stale:
            self._state = self.records.day_state(day)
            self._read_at = self.monotonic()
        return self._state

    def stage_cap(self, state: DayState) -> Decimal:
        return state.cap_usd if state.cap_usd is not None else self.cap_usd

    def verdict(self, user_id: str, shard: Table | None, tenant_cap: Decimal | None) -> Verdict | None:
        """None when a job of `user_id` may start now; else why it waits."""
        state = self.state()
        cap = self.stage_cap(state)
        if not state.released and state.stage_usd >= cap:
            return Verdict(
                f"the stage's model spend today ({state.stage_usd} USD) reached its cap of {cap} USD",
                stage=True, spent=state.stage_usd, cap=cap,
            )  # fmt: skip
        over = self.tenant_over(user_id, shard, tenant_cap, state)
        if over is not None:
            return Verdict(
                f"the tenant's model spend today ({over} USD) reached its cap of {tenant_cap} USD",
                stage=False, spent=over, cap=tenant_cap or Decimal(0),
            )  # fmt: skip
        return None

    def tenant_over(
        self, user_id: str, shard: Table | None, cap: Decimal | None, state: DayState | None = None
    ) -> Decimal | None:
        """The tenant's spend today when it reached its own cap (and it was not released)."""
        if cap is None or shard is None:
            return None
        state = state or self.state()
        if user_id in state.released_tenants:
            return None
        spent = self.records.tenant_spend(shard, user_id, state.day)
        return spent if spent >= cap else None

    def count_writes(
        self, *, job_id: str, user_id: str, cost: float, shard_name: str
    ) -> list[dict[str, Any]]:
        """The counter writes of a succeeded job's final transaction; this container's cached
        stage total moves with them, so it sees its own spend before the next read."""
        now = self.clock()
        amount = usd(cost)
        day = day_of(now, self.zone)
        if self._state is not None and self._state.day == day:
            self._state = DayState(
                day=day, stage_usd=self._state.stage_usd + amount, cap_usd=self._state.cap_usd,
                released=self._state.released, alerted_cap=self._state.alerted_cap,
                released_tenants=self._state.released_tenants,
            )  # fmt: skip
        return self.records.count_writes(
            day=day, job_id=job_id, user_id=user_id, cost=amount, shard_name=shard_name,
            expires=now + SPEND_RETENTION,
        )  # fmt: skip

    def resets_at(self) -> datetime:
        return resets_at(self.clock(), self.zone)


def build_brake(
    meta: Table, cap_usd: str, zone_name: str, clock: Callable[[], datetime]
) -> SpendBrake | None:
    """The brake of a stage (None when SPEND_DAILY_CAP_USD is empty: no brake, no calls)."""
    if not cap_usd.strip():
        return None
    return SpendBrake(SpendRecords(meta), usd(cap_usd.strip()), time_zone(zone_name), clock)
