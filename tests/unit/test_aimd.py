"""The AIMD step of adaptive consumer concurrency (aijobs.aimd) on synthetic throttle series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aijobs.aimd import HOLD, NARROW, WIDEN, ConcurrencySettings, MinuteCount, next_step

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
SETTINGS = ConcurrencySettings(
    ceiling=40,
    narrow_percent=10,
    narrow_min_throttles=5,
    window=timedelta(minutes=5),
    cooldown=timedelta(minutes=3),
    quiet=timedelta(minutes=10),
    step=2,
)


def series(*minutes: tuple[int, int, int], instances: int = 0) -> list[MinuteCount]:
    """(minutes before NOW, attempts, throttled) per minute; `instances` consumers in each."""
    base = NOW.replace(second=0)
    ids = frozenset(f"i{n}" for n in range(instances))
    return [
        MinuteCount(base - timedelta(minutes=ago), attempts, throttled, ids)
        for ago, attempts, throttled in minutes
    ]


def storm(throttled: int = 30, attempts: int = 100) -> list[MinuteCount]:
    return series((0, attempts, throttled))


def test_a_throttle_storm_halves_the_current_value() -> None:
    step = next_step(40, storm(), now=NOW, settings=SETTINGS)
    assert (step.action, step.value) == (NARROW, 20)
    assert (step.attempts, step.throttled) == (100, 30)
    assert "30 of 100 attempts throttled" in step.reason


def test_narrowing_never_goes_below_two_the_mappings_minimum() -> None:
    assert next_step(5, storm(), now=NOW, settings=SETTINGS).value == 2
    assert next_step(3, storm(), now=NOW, settings=SETTINGS).value == 2
    at_floor = next_step(2, storm(), now=NOW, settings=SETTINGS)
    assert (at_floor.action, at_floor.value) == (HOLD, 2)


def test_an_uncapped_mapping_narrows_from_what_actually_ran() -> None:
    """No MaximumConcurrency yet: half of the consumers seen in the window, not half of 1000."""
    step = next_step(None, series((0, 100, 40), instances=12), now=NOW, settings=SETTINGS)
    assert (step.action, step.value, step.instances) == (NARROW, 6, 12)
    unseen = next_step(None, storm(), now=NOW, settings=SETTINGS)
    assert unseen.value == 20  # nobody seen: from the ceiling


def test_a_single_429_does_nothing() -> None:
    step = next_step(40, series((0, 1, 1)), now=NOW, settings=SETTINGS)
    assert (step.action, step.value) == (HOLD, 40)


def test_throttles_below_the_rate_threshold_do_nothing() -> None:
    step = next_step(40, storm(throttled=9, attempts=100), now=NOW, settings=SETTINGS)
    assert (step.action, step.value) == (HOLD, 40)


def test_throttles_outside_the_window_do_not_count() -> None:
    old = series((6, 100, 100))
    assert next_step(40, old, now=NOW, settings=SETTINGS).action == HOLD


def test_at_most_one_narrowing_per_cool_down() -> None:
    recent = NOW - timedelta(minutes=2)
    held = next_step(20, storm(), now=NOW, settings=SETTINGS, last_narrowed_at=recent)
    assert (held.action, held.value) == (HOLD, 20)
    later = next_step(20, storm(), now=NOW, settings=SETTINGS, last_narrowed_at=NOW - timedelta(minutes=3))
    assert (later.action, later.value) == (NARROW, 10)


def test_widening_waits_for_a_quiet_period_then_adds_the_step() -> None:
    narrowed = NOW - timedelta(minutes=11)
    throttled_9_min_ago = series((9, 50, 10), (1, 50, 0))
    assert (
        next_step(10, throttled_9_min_ago, now=NOW, settings=SETTINGS, last_narrowed_at=narrowed).action
        == HOLD
    )
    quiet = series((11, 50, 10), (1, 50, 0))
    step = next_step(10, quiet, now=NOW, settings=SETTINGS, last_narrowed_at=narrowed)
    assert (step.action, step.value) == (WIDEN, 12)
    assert "no throttle for 10 min" in step.reason


def test_widening_is_additive_once_per_cool_down() -> None:
    quiet = series((1, 50, 0))
    early = next_step(12, quiet, now=NOW, settings=SETTINGS, last_widened_at=NOW - timedelta(minutes=1))
    assert (early.action, early.value) == (HOLD, 12)
    step = next_step(12, quiet, now=NOW, settings=SETTINGS, last_widened_at=NOW - timedelta(minutes=3))
    assert (step.action, step.value) == (WIDEN, 14)


def test_widening_stops_at_the_ceiling() -> None:
    assert next_step(39, [], now=NOW, settings=SETTINGS).value == 40
    at_ceiling = next_step(40, [], now=NOW, settings=SETTINGS)
    assert (at_ceiling.action, at_ceiling.value) == (HOLD, 40)


def test_an_uncapped_quiet_mapping_is_left_alone() -> None:
    step = next_step(None, series((1, 50, 0)), now=NOW, settings=SETTINGS)
    assert (step.action, step.value) == (HOLD, None)


def test_reserved_concurrency_one_is_never_touched() -> None:
    reserved = ConcurrencySettings(ceiling=1)
    assert not reserved.governed
    for current, counts in ((None, storm()), (None, [])):
        step = next_step(current, counts, now=NOW, settings=reserved)
        assert (step.action, step.value) == (HOLD, None)
        assert "reserved concurrency 1" in step.reason


def test_a_storm_then_quiet_narrows_step_by_step_and_widens_back() -> None:
    """The whole curve, one run per minute: 40 -> 20 -> 10 -> 5 -> 2 under a sustained storm
    (one narrowing per cool-down), then +2 per cool-down once quiet, back to the ceiling."""
    value: int | None = 40
    narrowed: datetime | None = None
    widened: datetime | None = None
    counts: list[MinuteCount] = []
    values: list[int] = []
    start = NOW.replace(second=0)
    for minute in range(200):
        now = start + timedelta(minutes=minute, seconds=30)
        storming = minute < 15
        counts.append(MinuteCount(now.replace(second=0), 100, 50 if storming else 0))
        step = next_step(
            value, counts, now=now, settings=SETTINGS, last_narrowed_at=narrowed, last_widened_at=widened
        )
        if step.action == NARROW:
            narrowed = now
        elif step.action == WIDEN:
            widened = now
        value = step.value
        assert value is not None
        values.append(value)
    assert values[:13] == [20, 20, 20, 10, 10, 10, 5, 5, 5, 2, 2, 2, 2]
    assert min(values) == 2
    first_widen = next(i for i, v in enumerate(values) if i > 15 and v == 4)
    assert first_widen >= 15 + 10  # after the quiet period
    assert values[-1] == 40
