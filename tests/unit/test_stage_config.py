"""Stage configuration: list splitting, queue naming, key validation and the derived settings."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from dotenv import dotenv_values

from aijobs.cron import CronError
from aijobs_cdk import stage_config
from aijobs_cdk.stage_config import (
    DLQ_SUFFIX,
    ESM_MAX_CONCURRENCY_MAX,
    ESM_MAX_CONCURRENCY_MIN,
    INT_KEYS,
    KNOWN_KEYS,
    RECEIVE_HEADROOM,
    SQS_QUEUE_NAME_MAX,
    SQS_VISIBILITY_MAX_SECONDS,
    ConfigError,
    StageConfig,
    binding_name,
    check_unique_bindings,
    parse_stage_config,
    queue_name_from_resource,
    queue_name_of,
    queue_resource_name,
    resource_prefix,
    split_list,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
# Sample queue names (the shipped kinds' names, as a team would spell its own).
SHIPPED_QUEUES = ("image-generate", "tts-generate", "video-generate", "summary", "embedding")


def _parse(stage: str = "dev", **values: str | None) -> StageConfig:
    return parse_stage_config(stage, values)


def _budget(stage: str) -> int:
    """Longest queue name whose DLQ (`aijobs-<stage>-<name>-dlq`) still fits the SQS name limit."""
    return SQS_QUEUE_NAME_MAX - len(queue_resource_name(stage, "")) - len(DLQ_SUFFIX)


# --- split_list ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a;b", ("a", "b")),
        ("a", ("a",)),
        (" a ; b ", ("a", "b")),
        ("\ta;\nb ", ("a", "b")),
        ("a;b;a", ("a", "b")),
        ("b;a;b;c;a", ("b", "a", "c")),
        (" a;a ; a", ("a",)),
        ("a;;b", ("a", "b")),
        ("a;", ("a",)),
        (";a", ("a",)),
        (";;", ()),
        (";", ()),
        (" ; ; ", ()),
        ("", ()),
        ("   ", ()),
        (None, ()),
        # Inner spaces belong to the entry (crons are space-separated).
        ("*/10 * * * *; 0 9 * * 1-5 ;*/10 * * * *", ("*/10 * * * *", "0 9 * * 1-5")),
        # Case matters: these are different entries.
        ("a;A", ("a", "A")),
    ],
)
def test_split_list(raw: str | None, expected: tuple[str, ...]) -> None:
    assert split_list(raw) == expected


# --- binding names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queue_name", "binding"),
    [
        ("tts-generate", "Q_TTS_GENERATE"),
        ("summary", "Q_SUMMARY"),
        ("image-generate", "Q_IMAGE_GENERATE"),
        ("v2-render-4k", "Q_V2_RENDER_4K"),
        ("123", "Q_123"),
        ("a-b-c", "Q_A_B_C"),
        ("a--b", "Q_A__B"),
    ],
)
def test_binding_name(queue_name: str, binding: str) -> None:
    assert binding_name(queue_name) == binding


@pytest.mark.parametrize(
    ("names", "first", "second", "binding"),
    [
        # `a_b` could never pass the queue-name validator (no underscores), so the collision is
        # provoked by calling the check directly.
        (("a-b", "a_b"), "a-b", "a_b", "Q_A_B"),
        (("x", "a-b", "y", "A-B"), "a-b", "A-B", "Q_A_B"),
        (("a.b", "a-b"), "a.b", "a-b", "Q_A_B"),
    ],
)
def test_check_unique_bindings_rejects_two_names_for_one_binding(
    names: tuple[str, ...], first: str, second: str, binding: str
) -> None:
    expected = f"{first!r} and {second!r} both map to binding {binding}"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        check_unique_bindings(names)


@pytest.mark.parametrize("names", [(), ("a",), ("a-b", "ab", "a-b-c", "b-a"), SHIPPED_QUEUES])
def test_check_unique_bindings_accepts_distinct_bindings(names: tuple[str, ...]) -> None:
    check_unique_bindings(names)  # must not raise
    assert len({binding_name(name) for name in names}) == len(names)


def test_bindings_property_maps_every_queue() -> None:
    config = _parse(QUEUE_NAMES="tts-generate;summary")
    assert config.bindings == {"tts-generate": "Q_TTS_GENERATE", "summary": "Q_SUMMARY"}


# --- queue names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "Tts",
        "TTS-GENERATE",
        "tts_generate",
        "-tts",
        "tts-",
        "-",
        "tts generate",
        "tts.generate",
        "tts/x",
        "café",
    ],
)
def test_invalid_queue_names_are_rejected(name: str) -> None:
    with pytest.raises(ConfigError, match=r"^QUEUE_NAMES: ") as caught:
        _parse(QUEUE_NAMES=f"summary;{name};embedding")
    assert repr(name) in str(caught.value)
    assert "lowercase letters, digits and hyphens" in str(caught.value)


@pytest.mark.parametrize("name", ["a", "0", "a1", "1a", "tts-generate", "a--b", "v2-render-4k"])
def test_valid_queue_names_are_accepted(name: str) -> None:
    assert _parse(QUEUE_NAMES=name).queue_names == (name,)


def test_queue_names_keep_order_and_drop_duplicates() -> None:
    config = _parse(QUEUE_NAMES=" summary ; tts-generate;summary;;")
    assert config.queue_names == ("summary", "tts-generate")


@pytest.mark.parametrize("raw", [None, "", " ", ";;"])
def test_no_queue_names_is_allowed(raw: str | None) -> None:
    config = _parse(QUEUE_NAMES=raw)
    assert config.queue_names == ()
    assert config.bindings == {}


@pytest.mark.parametrize("stage", ["dev", "prod", "a", "abcdefghij"])
def test_queue_name_length_limit(stage: str) -> None:
    budget = _budget(stage)
    assert budget > 0
    at_limit = "q" * budget
    assert len(queue_resource_name(stage, at_limit) + DLQ_SUFFIX) == SQS_QUEUE_NAME_MAX
    assert parse_stage_config(stage, {"QUEUE_NAMES": at_limit}).queue_names == (at_limit,)

    too_long = at_limit + "q"
    with pytest.raises(ConfigError) as caught:
        parse_stage_config(stage, {"QUEUE_NAMES": too_long})
    message = str(caught.value)
    assert message.startswith("QUEUE_NAMES: ")
    assert repr(too_long) in message
    assert repr(queue_resource_name(stage, too_long) + DLQ_SUFFIX) in message
    assert f"({SQS_QUEUE_NAME_MAX + 1} characters, SQS allows {SQS_QUEUE_NAME_MAX})" in message
    assert f"keep queue names to {budget} characters on stage {stage!r}" in message


def test_queue_name_budget_shrinks_with_a_longer_stage_name() -> None:
    name = "q" * _budget("dev")
    assert _parse(QUEUE_NAMES=name).queue_names == (name,)
    with pytest.raises(ConfigError, match="too long"):
        parse_stage_config("devstaging", {"QUEUE_NAMES": name})


# --- stage names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["dev", "prod", "a", "a1", "pr123", "abcdefghij"])
def test_valid_stage_names(stage: str) -> None:
    config = parse_stage_config(stage, {})
    assert config.stage == stage
    assert config.is_production is (stage == "prod")


@pytest.mark.parametrize(
    "stage", ["", "Dev", "PROD", "1dev", "dev-1", "dev_1", "abcdefghijk", "dév", " dev", "dev ", "de v"]
)
def test_invalid_stage_names(stage: str) -> None:
    with pytest.raises(
        ConfigError, match="must be 1-10 lowercase letters/digits starting with a letter"
    ) as caught:
        parse_stage_config(stage, {})
    assert repr(stage) in str(caught.value)


def test_stage_name_with_trailing_newline_is_rejected() -> None:
    # `$` would also match before a final newline; the whole name must match.
    with pytest.raises(ConfigError, match="must be 1-10 lowercase"):
        parse_stage_config("dev\n", {})


def test_resource_names() -> None:
    assert resource_prefix("dev") == "aijobs-dev"
    assert queue_resource_name("dev", "tts-generate") == "aijobs-dev-tts-generate"
    assert queue_resource_name("prod", "summary") == "aijobs-prod-summary"


@pytest.mark.parametrize("stage", ["dev", "prod", "a1"])
@pytest.mark.parametrize("queue_name", [*SHIPPED_QUEUES, "a", "dev-thing"])
def test_queue_name_from_resource_inverts_queue_resource_name(stage: str, queue_name: str) -> None:
    assert queue_name_from_resource(stage, queue_resource_name(stage, queue_name)) == queue_name


@pytest.mark.parametrize(
    ("stage", "resource_name"),
    [
        ("dev", "aijobs-prod-summary"),  # another stage's queue
        ("prod", "aijobs-dev-summary"),
        ("dev", "aijobs-dev2-summary"),  # a stage whose name merely starts with "dev"
        ("dev", "other-dev-summary"),  # another app
        ("dev", "aijobs-dev"),  # the prefix without a queue
        ("dev", "aijobs-dev-"),
        ("dev", "summary"),
        ("dev", ""),
    ],
)
def test_queue_name_from_resource_is_none_for_foreign_names(stage: str, resource_name: str) -> None:
    assert queue_name_from_resource(stage, resource_name) is None


def test_queue_name_from_resource_maps_a_dlq_to_its_kind() -> None:
    assert queue_name_from_resource("dev", queue_resource_name("dev", "summary") + DLQ_SUFFIX) == "summary"


def test_queue_names_may_not_end_with_the_dlq_suffix() -> None:
    with pytest.raises(ConfigError, match="'reports-dlq' must not end with '-dlq'"):
        _parse(QUEUE_NAMES="summary;reports-dlq")


@pytest.mark.parametrize("reserved", ["dlq-parking", "cron-dead-letters"])
def test_queue_names_may_not_take_the_stages_own_queue_names(reserved: str) -> None:
    # Outside production the parking and cron dead-letter queues are `aijobs-<stage>-<name>`.
    with pytest.raises(ConfigError, match=f"'{reserved}' is reserved"):
        _parse(QUEUE_NAMES=f"summary;{reserved}")


def test_queue_name_of_reads_urls_and_arns_alike() -> None:
    assert queue_name_of("https://sqs.us-east-1.amazonaws.com/123456789012/aijobs-prod-Q1-abc") == (
        "aijobs-prod-Q1-abc"
    )
    assert queue_name_of("arn:aws:sqs:us-east-1:123456789012:aijobs-prod-Q1-abc") == "aijobs-prod-Q1-abc"


# --- keys ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "listed"),
    [
        ({"QUEUE_NAME": "summary"}, "['QUEUE_NAME']"),
        ({"queue_names": "summary"}, "['queue_names']"),
        ({"CRON": "* * * * *"}, "['CRON']"),
        ({"MAX_RETRY": "3"}, "['MAX_RETRY']"),
        ({"ZZZ": "1", "AAA": None, "QUEUE_NAMES": "summary"}, "['AAA', 'ZZZ']"),
    ],
)
def test_unknown_keys_are_rejected(values: dict[str, str | None], listed: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"unknown configuration keys {listed}")) as caught:
        parse_stage_config("dev", values)
    assert "known keys:" in str(caught.value)
    assert "'QUEUE_NAMES'" in str(caught.value).split("known keys:")[1]


def test_every_known_key_is_accepted_and_empty_means_default() -> None:
    config = parse_stage_config("dev", dict.fromkeys(KNOWN_KEYS, ""))
    assert config.queue_names == ()
    assert config.crons == ()
    assert config.queue_max_concurrency is None
    assert config.alert_email is None
    for key, spec in INT_KEYS.items():
        assert getattr(config, key.lower()) == spec.default, key


def test_known_keys_cover_every_config_field() -> None:
    # `kind_tuning` is read from the kinds' declarations, not from a key.
    fields = {field.name for field in dataclasses.fields(StageConfig)} - {"stage", "crons", "kind_tuning"}
    # The four KIND_* provider keys become one validated plan per kind.
    plan_keys = {"kind_providers", "kind_models", "kind_allowed_models", "kind_fallbacks"}
    assert fields == ({key.lower() for key in KNOWN_KEYS} - {"crons"} - plan_keys) | {"provider_plans"}


def test_the_api_is_told_the_price_of_a_classify_call_too() -> None:
    """`classify` has no queue, but every stage serves it and each call is charged
    (docs/concepts/credits.md)."""
    assert _parse(QUEUE_NAMES="summary").prices == {"summary": 1, "classify": 1}
    config = _parse(QUEUE_NAMES="summary", KIND_PRICES="classify:3")
    assert config.api_settings_env()["KIND_PRICES"] == "summary:1;classify:3"
    with pytest.raises(ConfigError, match="not in QUEUE_NAMES"):
        _parse(QUEUE_NAMES="summary", KIND_PRICES="embedding:2")


# --- crons ---------------------------------------------------------------------------------------


def test_crons_are_parsed_in_order_without_duplicates() -> None:
    config = _parse(CRONS="*/10 * * * *; 0 9 * * 1-5;*/10 * * * *")
    assert [cron.text for cron in config.crons] == ["*/10 * * * *", "0 9 * * 1-5"]
    assert [cron.to_aws() for cron in config.crons] == ["cron(0/10 * * * ? *)", "cron(0 9 ? * 2-6 *)"]


@pytest.mark.parametrize("bad", ["0 0 1 * 1", "61 * * * *", "@hourly", "0 0 * *", "0 0 * FOO *"])
def test_invalid_cron_names_the_key_and_the_expression(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^CRONS: ") as caught:
        _parse(CRONS=f"*/10 * * * *;{bad}")
    assert repr(bad) in str(caught.value)
    assert isinstance(caught.value.__cause__, CronError)


# --- integer keys --------------------------------------------------------------------------------

INT_KEY_NAMES = sorted(INT_KEYS)


@pytest.mark.parametrize("key", INT_KEY_NAMES)
@pytest.mark.parametrize("raw", ["<missing>", None, "", "   "])
def test_int_key_defaults(key: str, raw: str | None) -> None:
    values = {} if raw == "<missing>" else {key: raw}
    assert getattr(parse_stage_config("dev", values), key.lower()) == INT_KEYS[key].default


# Keys whose every value in bounds also needs another key set (queue retention < DLQ retention).
_COMPANIONS = {
    "QUEUE_RETENTION_DAYS": {"DLQ_RETENTION_DAYS": "13"},
    "DLQ_RETENTION_DAYS": {"QUEUE_RETENTION_DAYS": "1"},
}


@pytest.mark.parametrize("key", INT_KEY_NAMES)
def test_int_key_bounds_are_inclusive(key: str) -> None:
    spec = INT_KEYS[key]
    assert spec.low <= spec.default <= spec.high
    companions = _COMPANIONS.get(key, {})
    for number in (spec.low, spec.high):
        assert getattr(_parse(**{key: str(number)}, **companions), key.lower()) == number
    assert getattr(_parse(**{key: f" {spec.low} "}, **companions), key.lower()) == spec.low


@pytest.mark.parametrize("key", INT_KEY_NAMES)
def test_int_key_out_of_range(key: str) -> None:
    spec = INT_KEYS[key]
    for number in (spec.low - 1, spec.high + 1):
        expected = f"{key}={number} is outside {spec.low}-{spec.high}"
        with pytest.raises(ConfigError, match=re.escape(expected)):
            _parse(**{key: str(number)})


@pytest.mark.parametrize("key", INT_KEY_NAMES)
@pytest.mark.parametrize("raw", ["abc", "1.5", "ten", "0x10", "1e3", "5 5"])
def test_int_key_not_a_number(key: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{key}={raw!r} is not a whole number")):
        _parse(**{key: raw})


@pytest.mark.parametrize(
    ("key", "default"),
    [
        ("MAX_RETRIES", 3),
        ("BATCH_SIZE", 5),
        ("BATCH_WINDOW_SECONDS", 10),
        ("CONSUMER_TIMEOUT_SECONDS", 60),
        ("SHARD_COUNT", 1),
    ],
)
def test_documented_defaults(key: str, default: int) -> None:
    assert getattr(_parse(), key.lower()) == default


# --- QUEUE_MAX_CONCURRENCY -----------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["<missing>", None, "", "  "])
def test_no_max_concurrency(raw: str | None) -> None:
    values = {} if raw == "<missing>" else {"QUEUE_MAX_CONCURRENCY": raw}
    config = parse_stage_config("dev", values)
    assert config.queue_max_concurrency is None
    assert config.esm_max_concurrency is None
    assert config.consumer_reserved_concurrency is None
    assert config.max_receive_count == config.max_retries + 1 + RECEIVE_HEADROOM


@pytest.mark.parametrize("retries", ["0", "3", "10"])
def test_max_concurrency_one_becomes_reserved_concurrency(retries: str) -> None:
    config = _parse(QUEUE_MAX_CONCURRENCY="1", MAX_RETRIES=retries)
    assert config.queue_max_concurrency == 1
    assert config.consumer_reserved_concurrency == 1
    assert config.esm_max_concurrency is None
    assert config.max_receive_count == int(retries) + 1 + RECEIVE_HEADROOM


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (str(ESM_MAX_CONCURRENCY_MIN), ESM_MAX_CONCURRENCY_MIN),
        ("2", 2),
        ("7", 7),
        (" 7 ", 7),
        ("1000", 1000),
        (str(ESM_MAX_CONCURRENCY_MAX), ESM_MAX_CONCURRENCY_MAX),
    ],
)
def test_max_concurrency_becomes_esm_maximum_concurrency(raw: str, expected: int) -> None:
    config = _parse(QUEUE_MAX_CONCURRENCY=raw)
    assert config.esm_max_concurrency == expected
    assert config.consumer_reserved_concurrency is None
    assert config.max_receive_count == config.max_retries + 1 + RECEIVE_HEADROOM


@pytest.mark.parametrize("raw", ["0", "1001", "abc", "-1", "+5", "1.5", "2 3", "1e3"])
def test_invalid_max_concurrency(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"^QUEUE_MAX_CONCURRENCY=") as caught:
        _parse(QUEUE_MAX_CONCURRENCY=raw)
    assert repr(raw.strip()) in str(caught.value)
    assert f"from 1 to {ESM_MAX_CONCURRENCY_MAX}" in str(caught.value)


@pytest.mark.parametrize("raw", ["²", "٣"])
def test_non_ascii_digits_are_config_errors(raw: str) -> None:
    # str.isdigit() is true for these; they must still be refused with the key named.
    with pytest.raises(ConfigError, match=r"^QUEUE_MAX_CONCURRENCY="):
        _parse(QUEUE_MAX_CONCURRENCY=raw)
    with pytest.raises(ConfigError, match=r"^MAX_RETRIES="):
        _parse(MAX_RETRIES=raw)


@pytest.mark.parametrize("raw", ["1_0", "+5", " 3x"])
def test_integer_keys_take_plain_digits_only(raw: str) -> None:
    with pytest.raises(ConfigError, match="is not a whole number"):
        _parse(MAX_RETRIES=raw)


# --- retries, visibility, batching ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("retries", "attempts"), [(None, 4), ("", 4), ("0", 1), ("3", 4), ("5", 6), ("10", 11)]
)
def test_max_receive_count_follows_max_retries(retries: str | None, attempts: int) -> None:
    # The attempt budget plus headroom: the row's budget, not SQS's receive count, dead-letters.
    assert _parse(MAX_RETRIES=retries).max_receive_count == attempts + RECEIVE_HEADROOM


@pytest.mark.parametrize(
    ("timeout", "window", "visibility"),
    [(None, None, 6 * 60 + 10), ("60", "0", 360), ("3", "0", 18), ("30", "20", 200), ("900", "300", 5700)],
)
def test_visibility_timeout(timeout: str | None, window: str | None, visibility: int) -> None:
    config = _parse(CONSUMER_TIMEOUT_SECONDS=timeout, BATCH_WINDOW_SECONDS=window)
    assert config.visibility_timeout_seconds == visibility
    assert visibility == 6 * config.consumer_timeout_seconds + config.batch_window_seconds


def test_largest_configurable_timeout_fits_the_sqs_visibility_maximum() -> None:
    timeout, window = INT_KEYS["CONSUMER_TIMEOUT_SECONDS"].high, INT_KEYS["BATCH_WINDOW_SECONDS"].high
    config = _parse(CONSUMER_TIMEOUT_SECONDS=str(timeout), BATCH_WINDOW_SECONDS=str(window))
    assert config.visibility_timeout_seconds <= SQS_VISIBILITY_MAX_SECONDS


def test_visibility_above_twelve_hours_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    # Within the shipped bounds (timeout <= 900 s) the visibility can never pass 12 h, so widen the
    # timeout bound to reach the guard.
    assert SQS_VISIBILITY_MAX_SECONDS == 12 * 60 * 60
    wide = dataclasses.replace(INT_KEYS["CONSUMER_TIMEOUT_SECONDS"], high=100_000)
    monkeypatch.setitem(INT_KEYS, "CONSUMER_TIMEOUT_SECONDS", wide)
    timeout = SQS_VISIBILITY_MAX_SECONDS // 6  # 6 x timeout is exactly 12 h

    at_limit = _parse(CONSUMER_TIMEOUT_SECONDS=str(timeout), BATCH_WINDOW_SECONDS="0")
    assert at_limit.visibility_timeout_seconds == SQS_VISIBILITY_MAX_SECONDS

    over = SQS_VISIBILITY_MAX_SECONDS + 1
    with pytest.raises(ConfigError) as caught:
        _parse(CONSUMER_TIMEOUT_SECONDS=str(timeout), BATCH_WINDOW_SECONDS="1")
    message = str(caught.value)
    assert message.startswith(f"CONSUMER_TIMEOUT_SECONDS={timeout} ")
    assert f"visibility timeout of {over}s" in message
    assert f"SQS maximum of {SQS_VISIBILITY_MAX_SECONDS}s" in message


def test_visibility_guard_reads_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Default visibility is 6 x 60 + 10 = 370 s.
    monkeypatch.setattr(stage_config, "SQS_VISIBILITY_MAX_SECONDS", 370)
    assert _parse().visibility_timeout_seconds == 370
    monkeypatch.setattr(stage_config, "SQS_VISIBILITY_MAX_SECONDS", 369)
    with pytest.raises(ConfigError, match=r"visibility timeout of 370s .*SQS maximum of 369s"):
        _parse()


@pytest.mark.parametrize(("raw", "expected"), [(None, 5), ("1", 1), ("10", 10), ("10000", 10000)])
def test_batch_size(raw: str | None, expected: int) -> None:
    assert _parse(BATCH_SIZE=raw).batch_size == expected


@pytest.mark.parametrize("raw", ["0", "10001"])
def test_batch_size_out_of_range(raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"^BATCH_SIZE={raw} is outside 1-10000$"):
        _parse(BATCH_SIZE=raw)


def test_batch_size_ten_needs_no_batch_window() -> None:
    config = _parse(BATCH_SIZE="10", BATCH_WINDOW_SECONDS="0")
    assert (config.batch_size, config.batch_window_seconds) == (10, 0)


def test_batch_size_above_ten_needs_a_batch_window() -> None:
    # SQS allows up to 10,000 records per batch on standard queues only with a batching window.
    with pytest.raises(ConfigError, match="BATCH_SIZE above 10 needs BATCH_WINDOW_SECONDS of at least 1"):
        _parse(BATCH_SIZE="11", BATCH_WINDOW_SECONDS="0")
    assert _parse(BATCH_SIZE="11", BATCH_WINDOW_SECONDS="1").batch_size == 11
    assert _parse(BATCH_SIZE="11").batch_window_seconds == 10  # the default window is enough


# --- ALERT_EMAIL ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("ops@example.com", "ops@example.com"),
        ("  ops@example.com ", "ops@example.com"),
        ("first.last+alerts@sub.example.co.uk", "first.last+alerts@sub.example.co.uk"),
    ],
)
def test_alert_email(raw: str | None, expected: str | None) -> None:
    assert _parse(ALERT_EMAIL=raw).alert_email == expected


@pytest.mark.parametrize(
    "raw",
    [
        "ops",
        "ops@example",
        "@example.com",
        "ops@",
        "ops@.",
        "ops @example.com",
        "ops@exa mple.com",
        "ops@@example.com",
        "a@b@example.com",
        "ops@example.com;dev@example.com",
        "ops@example.com, dev@example.com",
    ],
)
def test_invalid_alert_email(raw: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"ALERT_EMAIL={raw!r} is not an e-mail address")):
        _parse(ALERT_EMAIL=raw)


# --- spend brake ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cap", "zone", "expected"),
    [
        (None, None, ("", "UTC")),
        ("", " ", ("", "UTC")),
        (" 250 ", "Europe/Paris", ("250", "Europe/Paris")),
        ("12.5", "America/New_York", ("12.5", "America/New_York")),
        ("0", "UTC", ("0", "UTC")),
    ],
)
def test_spend_keys(cap: str | None, zone: str | None, expected: tuple[str, str]) -> None:
    config = _parse(SPEND_DAILY_CAP_USD=cap, SPEND_TIME_ZONE=zone)
    assert (config.spend_daily_cap_usd, config.spend_time_zone) == expected
    assert config.spend_env() == {"SPEND_DAILY_CAP_USD": expected[0], "SPEND_TIME_ZONE": expected[1]}


@pytest.mark.parametrize("raw", ["-5", "-0.01", "ten", "1e3", "12,5", "$20", "1.1234567"])
def test_a_spend_cap_that_is_not_a_plain_amount_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"SPEND_DAILY_CAP_USD={raw!r} must be empty")):
        _parse(SPEND_DAILY_CAP_USD=raw)


@pytest.mark.parametrize("raw", ["Mars/Olympus_Mons", "CEST", "UTC+2", "../etc/passwd"])
def test_an_unknown_spend_time_zone_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"SPEND_TIME_ZONE={raw!r} is not an IANA time zone")):
        _parse(SPEND_TIME_ZONE=raw)


# --- shipped .env files --------------------------------------------------------------------------


def _load(stage: str) -> StageConfig:
    path = REPO_ROOT / f".env.{stage}"
    assert path.is_file(), path
    return parse_stage_config(stage, dotenv_values(path))


def _assert_registered(config: StageConfig) -> None:
    """The stage's kinds and crons are what its file lists (however many a team adds), each with a
    registered handler, and the jobs the system relies on are scheduled (credit expiry at */10)."""
    from aijobs.consumer.registry import QUEUE_HANDLERS
    from aijobs.scheduled.concurrency import run_concurrency_control
    from aijobs.scheduled.maintenance import run_maintenance
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS
    from aijobs.scheduled.sweeper import run_sweeper

    values = dotenv_values(REPO_ROOT / f".env.{config.stage}")
    assert config.queue_names == split_list(values["QUEUE_NAMES"])
    assert config.queue_names, "a shipped stage has job kinds"
    assert [kind for kind in config.queue_names if kind not in QUEUE_HANDLERS] == []
    assert set(config.workflow_children.values()) <= set(config.queue_names)
    assert tuple(cron.text for cron in config.crons) == split_list(values["CRONS"])
    assert [cron.text for cron in config.crons if cron.text not in SCHEDULED_HANDLERS] == []
    scheduled = {cron.text: SCHEDULED_HANDLERS[cron.text] for cron in config.crons}
    assert {run_maintenance, run_sweeper, run_concurrency_control} <= set(scheduled.values())
    (maintenance,) = [cron for cron in config.crons if scheduled[cron.text] is run_maintenance]
    assert (maintenance.text, maintenance.to_aws()) == ("*/10 * * * *", "cron(0/10 * * * ? *)")


def test_shipped_dev_config() -> None:
    config = _load("dev")
    assert config.stage == "dev"
    assert not config.is_production
    _assert_registered(config)
    assert config.queue_max_concurrency is None
    assert config.max_receive_count == 4 + RECEIVE_HEADROOM
    assert (config.spend_daily_cap_usd, config.spend_time_zone) == ("", "UTC")  # no brake shipped


def test_shipped_prod_config() -> None:
    config = _load("prod")
    assert config.stage == "prod"
    assert config.is_production
    _assert_registered(config)
    assert config.alert_email is None


def test_auth_mode_defaults_to_api_keys() -> None:
    config = _parse()
    assert (config.auth_mode, config.jwt_issuer_url, config.jwt_audience) == ("api_key", None, None)


@pytest.mark.parametrize(
    "values",
    [
        {"AUTH_MODE": "jwt"},
        {"AUTH_MODE": "jwt", "JWT_ISSUER_URL": "https://issuer.example"},
        {"AUTH_MODE": "jwt", "JWT_ISSUER_URL": "http://plain.example", "JWT_AUDIENCE": "client"},
        {"AUTH_MODE": "cookie"},
    ],
)
def test_jwt_mode_needs_an_https_issuer_and_an_audience(values: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="AUTH_MODE"):
        _parse(**values)


def test_the_jwt_operator_group_defaults_to_aijobs_operators_and_reaches_the_api() -> None:
    assert _parse().jwt_operator_group == "aijobs-operators"
    assert _parse().api_settings_env()["JWT_OPERATOR_GROUP"] == "aijobs-operators"
    config = _parse(JWT_OPERATOR_GROUP=" platform-oncall ")
    assert config.api_settings_env()["JWT_OPERATOR_GROUP"] == "platform-oncall"


@pytest.mark.parametrize("group", ["ops team", "ops,team", "[ops]", 'ops"', "ops'", "x" * 129, "ops\tteam"])
def test_a_jwt_operator_group_the_flattened_claim_could_not_carry_is_refused(group: str) -> None:
    with pytest.raises(ConfigError, match="JWT_OPERATOR_GROUP"):
        _parse(JWT_OPERATOR_GROUP=group)


def test_job_lease_defaults_to_the_consumer_timeout_plus_a_margin() -> None:
    assert _parse().lease_seconds == 60 + 30
    assert _parse(CONSUMER_TIMEOUT_SECONDS="120").lease_seconds == 150
    assert _parse(JOB_LEASE_SECONDS="200").lease_seconds == 200
    with pytest.raises(
        ConfigError, match="JOB_LEASE_SECONDS=30 must be at least CONSUMER_TIMEOUT_SECONDS=60"
    ):
        _parse(JOB_LEASE_SECONDS="30")


@pytest.mark.parametrize(
    ("queue", "dlq"),
    [("7", "7"), ("5", "4"), ("12", "12"), ("2", "2"), ("12", "13")],
)
def test_queue_retention_must_be_shorter_than_its_dlqs_and_the_dlqs_than_the_parking_queues(
    queue: str, dlq: str
) -> None:
    """SQS counts a dead letter's retention from its first send: a DLQ keeping no longer than its
    queue, or the parking queue (14 days) no longer than a DLQ, drops letters nobody has seen."""
    if (queue, dlq) == ("12", "13"):
        config = _parse(QUEUE_RETENTION_DAYS=queue, DLQ_RETENTION_DAYS=dlq)
        assert (config.queue_retention_days, config.dlq_retention_days) == (12, 13)
        return
    with pytest.raises(ConfigError, match=r"QUEUE_RETENTION_DAYS=\d+ < DLQ_RETENTION_DAYS=\d+ < 14"):
        _parse(QUEUE_RETENTION_DAYS=queue, DLQ_RETENTION_DAYS=dlq)


def test_queue_retention_defaults_to_four_days_and_the_dlqs_to_seven() -> None:
    config = _parse()
    assert (config.queue_retention_days, config.dlq_retention_days) == (4, 7)


def test_consumers_get_the_stage_memory_unless_their_kind_declares_its_own() -> None:
    default = _parse(QUEUE_NAMES="summary;image-generate;tts-generate;video-generate")
    assert INT_KEYS["CONSUMER_MEMORY_MB"].default == default.consumer_memory_mb == 256
    memory = {kind: default.queue_tuning(kind).memory_mb for kind in default.queue_names}
    assert memory == {"summary": 256, "image-generate": 512, "tts-generate": 512, "video-generate": 256}
    raised = _parse(QUEUE_NAMES="summary;image-generate", CONSUMER_MEMORY_MB="1024")
    assert (raised.queue_tuning("summary").memory_mb, raised.queue_tuning("image-generate").memory_mb) == (
        1024,
        512,
    )
    for wrong in ("127", "10241", "lots"):
        with pytest.raises(ConfigError, match="CONSUMER_MEMORY_MB"):
            _parse(QUEUE_NAMES="summary", CONSUMER_MEMORY_MB=wrong)
