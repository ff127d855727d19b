"""Adaptive consumer concurrency (AIMD): the pure step that narrows a throttled kind and widens it again.

A kind whose provider answers 429s gets its event-source mapping's `MaximumConcurrency` halved
(never below 2, the mapping's minimum); once no throttle was counted for a quiet period it is
raised by a fixed step, back up to its ceiling (`QUEUE_MAX_CONCURRENCY`, or the mapping's
maximum when none is set). The input is the per-minute throttle counters the consumers record
(aijobs.consumer.meter), never a single 429. Nothing here does I/O: the cron job
(aijobs.scheduled.concurrency) reads the counters and the state, calls `next_step`, and applies it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aijobs.bindings import ESM_MAX_CONCURRENCY_MAX, ESM_MAX_CONCURRENCY_MIN

NARROW, WIDEN, HOLD = "narrow", "widen", "hold"


@dataclass(frozen=True)
class ConcurrencySettings:
    """The thresholds (stage keys THROTTLE_* and CONCURRENCY_*, see docs/concepts/flow-control.md)."""

    # The highest value the controller sets; 1 means reserved concurrency 1: never adjusted.
    ceiling: int = ESM_MAX_CONCURRENCY_MAX
    # Narrow when at least this share (percent) of the window's attempts were throttled ...
    narrow_percent: int = 10
    # ... and at least this many of them were: a single 429 never narrows a kind.
    narrow_min_throttles: int = 5
    window: timedelta = timedelta(minutes=5)
    # At most one narrowing per cool-down (the last one needs time to show in the counters).
    cooldown: timedelta = timedelta(minutes=3)
    # Widen only after this long without a single throttle, then by `step` per cool-down.
    quiet: timedelta = timedelta(minutes=10)
    step: int = 2
    factor: float = 0.5

    @property
    def governed(self) -> bool:
        """False for reserved concurrency 1 (QUEUE_MAX_CONCURRENCY=1): no MaximumConcurrency to set."""
        return self.ceiling >= ESM_MAX_CONCURRENCY_MIN

    @property
    def lookback(self) -> timedelta:
        """How far back the counters are read: the longer of the window and the quiet period."""
        return max(self.window, self.quiet)


@dataclass(frozen=True)
class MinuteCount:
    """One minute of a kind's consumer attempts, as the consumers recorded them."""

    minute: datetime
    attempts: int
    throttled: int
    # Ids of the consumer instances (containers) that counted attempts in this minute.
    instances: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Step:
    """What the controller decided for one kind, and why (logged, stored, shown)."""

    action: str
    value: int | None
    reason: str
    attempts: int = 0
    throttled: int = 0
    instances: int = 0

    @property
    def changed(self) -> bool:
        return self.action != HOLD


def _since(counts: Sequence[MinuteCount], start: datetime, now: datetime) -> list[MinuteCount]:
    first = start.replace(second=0, microsecond=0)
    return [count for count in counts if first <= count.minute <= now]


def next_step(
    current: int | None,
    counts: Sequence[MinuteCount],
    *,
    now: datetime,
    settings: ConcurrencySettings,
    last_narrowed_at: datetime | None = None,
    last_widened_at: datetime | None = None,
) -> Step:
    """The next `MaximumConcurrency` of a kind: `current` (None: the mapping has none) narrowed,
    widened or held, given its recent per-minute counters."""
    if not settings.governed:
        return Step(HOLD, current, "reserved concurrency 1 (QUEUE_MAX_CONCURRENCY=1): never adjusted")
    window = _since(counts, now - settings.window, now)
    attempts = sum(count.attempts for count in window)
    throttled = sum(count.throttled for count in window)
    seen = len(frozenset().union(*(count.instances for count in window)))
    figures = {"attempts": attempts, "throttled": throttled, "instances": seen}
    rate = throttled / attempts if attempts else (1.0 if throttled else 0.0)
    if throttled >= settings.narrow_min_throttles and rate * 100 >= settings.narrow_percent:
        if last_narrowed_at is not None and now - last_narrowed_at < settings.cooldown:
            return Step(HOLD, current, "throttled, but narrowed less than a cool-down ago", **figures)
        # From what actually ran when nothing capped it lower: halving an unused cap changes nothing.
        base = settings.ceiling if current is None else current
        if seen:
            base = min(base, seen)
        target = max(ESM_MAX_CONCURRENCY_MIN, math.floor(base * settings.factor))
        if current is not None and target >= current:
            return Step(HOLD, current, "throttled, already at the floor", **figures)
        reason = f"{throttled} of {attempts} attempts throttled in {_minutes(settings.window)}"
        return Step(NARROW, target, reason, **figures)
    recent = sum(count.throttled for count in _since(counts, now - settings.quiet, now))
    if recent:
        return Step(HOLD, current, "throttles below the threshold or not quiet yet", **figures)
    if current is None or current >= settings.ceiling:
        return Step(HOLD, current, "at its ceiling", **figures)
    if last_narrowed_at is not None and now - last_narrowed_at < settings.quiet:
        return Step(HOLD, current, "narrowed less than a quiet period ago", **figures)
    if last_widened_at is not None and now - last_widened_at < settings.cooldown:
        return Step(HOLD, current, "widened less than a cool-down ago", **figures)
    target = min(settings.ceiling, current + settings.step)
    return Step(WIDEN, target, f"no throttle for {_minutes(settings.quiet)}", **figures)


def _minutes(span: timedelta) -> str:
    minutes = span.total_seconds() / 60
    return f"{minutes:g} min"
