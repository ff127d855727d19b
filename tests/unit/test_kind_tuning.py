"""A kind's own queue and consumer settings (aijobs.kinds.base.Tuning): resolved over the stage's,
bounded like the keys they override, and carried to the cron (KIND_LIMITS)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from aijobs.bindings import KindLimits, limits_setting, parse_limits
from aijobs.scheduled.context import CronContext
from aijobs_cdk.stage_config import (
    ESM_MAX_CONCURRENCY_MAX,
    LEASE_MARGIN_SECONDS,
    RECEIVE_HEADROOM,
    ConfigError,
    StageConfig,
    event_source_mappings_env,
    parse_stage_config,
)
from tests.probe_kinds import Tuning, declared, text_kind

PLAIN = "tuning-plain"
TUNED = "tuning-probe"
SINGLE = "tuning-single"


def _config(*kinds: str, stage: str = "dev", **values: str) -> StageConfig:
    return parse_stage_config(stage, {"QUEUE_NAMES": ";".join(kinds), "PROVIDER": "local", **values})


def test_a_kind_without_tuning_has_the_stages_values() -> None:
    with declared(text_kind(PLAIN)):
        config = _config(PLAIN, CONSUMER_TIMEOUT_SECONDS="45", MAX_RETRIES="2", BATCH_SIZE="7")
        tuning = config.queue_tuning(PLAIN)
    assert (tuning.timeout_seconds, tuning.max_retries, tuning.batch_size, tuning.memory_mb) == (
        45,
        2,
        7,
        256,
    )
    assert tuning.lease_seconds == config.lease_seconds == 45 + LEASE_MARGIN_SECONDS
    assert tuning.visibility_timeout_seconds == config.visibility_timeout_seconds
    assert tuning.max_receive_count == config.max_receive_count == 3 + RECEIVE_HEADROOM
    assert tuning.max_concurrency is None
    assert tuning.reserved_concurrency is None


def test_a_kinds_tuning_overrides_each_stage_value_for_that_kind_only() -> None:
    own = Tuning(timeout_seconds=120, memory_mb=1024, max_retries=6, batch_size=2, max_concurrency=8)
    with declared(text_kind(PLAIN), text_kind(TUNED, tuning=own)):
        config = _config(PLAIN, TUNED)
        tuned, plain = config.queue_tuning(TUNED), config.queue_tuning(PLAIN)
    assert (tuned.timeout_seconds, tuned.memory_mb, tuned.max_retries, tuned.batch_size) == (120, 1024, 6, 2)
    assert tuned.visibility_timeout_seconds == 6 * 120 + config.batch_window_seconds
    assert tuned.max_receive_count == 7 + RECEIVE_HEADROOM
    assert tuned.lease_seconds == 120 + LEASE_MARGIN_SECONDS
    assert tuned.esm_max_concurrency == 8
    assert (plain.timeout_seconds, plain.max_retries, plain.batch_size) == (60, 3, 5)


def test_the_consumer_environment_carries_the_kinds_retries_and_lease() -> None:
    with declared(text_kind(TUNED, tuning=Tuning(timeout_seconds=200, max_retries=1))):
        env = _config(TUNED).consumer_settings_env(TUNED)
    assert (env["MAX_RETRIES"], env["JOB_LEASE_SECONDS"]) == ("1", str(200 + LEASE_MARGIN_SECONDS))


def test_a_kind_running_longer_than_the_stages_lease_holds_its_jobs_for_its_own_timeout() -> None:
    # The local stage's short lease (JOB_LEASE_SECONDS=10 over a 5 s timeout) stays for other kinds.
    with declared(text_kind(PLAIN), text_kind(TUNED, tuning=Tuning(timeout_seconds=60))):
        config = _config(PLAIN, TUNED, stage="local", CONSUMER_TIMEOUT_SECONDS="5", JOB_LEASE_SECONDS="10")
        assert config.queue_tuning(PLAIN).lease_seconds == 10
        assert config.queue_tuning(TUNED).lease_seconds == 60 + LEASE_MARGIN_SECONDS


@pytest.mark.parametrize(("stage_cap", "own_cap", "expected"), [("", 8, 8), ("4", 8, 4), ("10", 8, 8)])
def test_the_lower_of_the_stage_and_kind_concurrency_caps_wins(
    stage_cap: str, own_cap: int, expected: int
) -> None:
    with declared(text_kind(TUNED, tuning=Tuning(max_concurrency=own_cap))):
        tuning = _config(TUNED, QUEUE_MAX_CONCURRENCY=stage_cap).queue_tuning(TUNED)
    assert tuning.esm_max_concurrency == expected
    assert tuning.limits.ceiling == expected


def test_a_kind_capped_at_one_is_reserved_concurrency_one_and_left_out_of_the_controllers_mappings() -> None:
    with declared(text_kind(PLAIN), text_kind(SINGLE, tuning=Tuning(max_concurrency=1))):
        config = _config(PLAIN, SINGLE)
        single = config.queue_tuning(SINGLE)
        env = event_source_mappings_env(config, {PLAIN: "uuid-plain", SINGLE: "uuid-single"})
    assert (single.reserved_concurrency, single.esm_max_concurrency) == (1, None)
    assert config.governed_kinds == (PLAIN,)
    assert env == {"EVENT_SOURCE_MAPPINGS": f"{PLAIN}=uuid-plain"}


def test_a_workflow_kind_keeps_the_stages_values() -> None:
    config = _config("summary", "summary-batch", BATCH_SIZE="3")
    assert config.queue_tuning("summary-batch").batch_size == 3


@pytest.mark.parametrize(
    ("tuning", "message"),
    [
        (
            Tuning(timeout_seconds=901),
            "timeout_seconds=901 must be a whole number from 3 to 900 (as CONSUMER_TIMEOUT_SECONDS)",
        ),
        (
            Tuning(memory_mb=64),
            "memory_mb=64 must be a whole number from 128 to 10240 (as CONSUMER_MEMORY_MB)",
        ),
        (Tuning(max_retries=11), "max_retries=11 must be a whole number from 0 to 10 (as MAX_RETRIES)"),
        (Tuning(batch_size=0), "batch_size=0 must be a whole number from 1 to 10000 (as BATCH_SIZE)"),
        (
            Tuning(max_concurrency=0),
            f"max_concurrency=0 must be a whole number from 1 to {ESM_MAX_CONCURRENCY_MAX}",
        ),
        (Tuning(max_retries=True), "max_retries=True must be a whole number"),
        (Tuning(timeout_seconds=1.5), "timeout_seconds=1.5 must be a whole number"),  # type: ignore[arg-type]
    ],
)
def test_tuning_outside_its_keys_bounds_fails_naming_the_kind_and_its_file(
    tuning: Tuning, message: str
) -> None:
    with declared(text_kind(TUNED, tuning=tuning)), pytest.raises(ConfigError) as raised:
        _config(TUNED)
    assert f"kind {TUNED!r} (aijobs/kinds/tuning_probe.py) tuning: " in str(raised.value)
    assert message in str(raised.value)


def test_a_batch_above_ten_needs_the_stages_window() -> None:
    with (
        declared(text_kind(TUNED, tuning=Tuning(batch_size=20))),
        pytest.raises(ConfigError, match="batch_size=20 above 10"),
    ):
        _config(TUNED, BATCH_WINDOW_SECONDS="0")
    with declared(text_kind(TUNED, tuning=Tuning(batch_size=20))):
        assert _config(TUNED, BATCH_WINDOW_SECONDS="1").queue_tuning(TUNED).batch_size == 20


def test_the_cron_receives_every_kinds_limits_and_reads_them_back() -> None:
    with declared(
        text_kind(PLAIN),
        text_kind(TUNED, tuning=Tuning(timeout_seconds=100, max_retries=5, max_concurrency=6)),
    ):
        config = _config(PLAIN, TUNED)
        limits = parse_limits(config.cron_settings_env()["KIND_LIMITS"])
    assert limits == {
        PLAIN: KindLimits(attempts=4, lease=60 + LEASE_MARGIN_SECONDS, ceiling=ESM_MAX_CONCURRENCY_MAX),
        TUNED: KindLimits(attempts=6, lease=100 + LEASE_MARGIN_SECONDS, ceiling=6),
    }
    assert parse_limits(limits_setting(limits)) == limits


@pytest.mark.parametrize(
    "raw",
    [
        "summary=attempts:4,lease:90",
        "summary=attempts:0,lease:90,ceiling:2",
        "summary=4,90,2",
        "=attempts:1,lease:1,ceiling:1",
    ],
)
def test_malformed_kind_limits_are_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match="KIND_LIMITS"):
        parse_limits(raw)


def test_the_cron_context_answers_per_kind_and_falls_back_to_the_stage() -> None:
    base = CronContext(
        stage="dev", directory=None, meta=None, queues=None, alerts=None, kinds=(PLAIN, TUNED),  # type: ignore[arg-type]
        max_attempts=4, lease=timedelta(seconds=90), recheck=timedelta(0),
        stuck_after=timedelta(seconds=900), clock=lambda: None,  # type: ignore[arg-type,return-value]
    )  # fmt: skip
    ctx = replace(base, limits={TUNED: KindLimits(attempts=7, lease=150, ceiling=5)})
    tuned = ctx.concurrency_of(TUNED)
    assert (ctx.max_attempts_of(TUNED), ctx.lease_of(TUNED).total_seconds(), tuned.ceiling) == (
        7,
        150,
        5,
    )
    assert (ctx.max_attempts_of(PLAIN), ctx.lease_of(PLAIN).total_seconds()) == (4, 90)
    assert ctx.concurrency_of(PLAIN) is ctx.concurrency
    # A kind's ceiling never lifts the stage's.
    capped = replace(ctx, concurrency=replace(ctx.concurrency, ceiling=3))
    assert capped.concurrency_of(TUNED).ceiling == 3
