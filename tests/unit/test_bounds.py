"""The one table of bounds of what operators set (aijobs.bounds): what it takes, what it refuses,
and that docs/configuration.md's table says the same bounds and the stage keys share them."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from aijobs.bounds import (
    BOUNDS,
    CREDIT_TX_RETENTION_DAYS,
    INVALID_STORED,
    SPEND_CAP_USD,
    TENANT_MAX_RUNNING,
    BoundError,
    stored,
)
from aijobs_cdk.stage_config import INT_KEYS, ConfigError, parse_stage_config

CONFIGURATION = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


@pytest.mark.parametrize(
    ("value", "taken"),
    [(1, 1), (3650, 3650), ("30", 30), (" 30 ", 30), (Decimal(30), 30), (Decimal("3E+1"), 30), ("3.0", 3)],
)
def test_a_whole_number_within_the_bounds_is_taken(value: object, taken: int) -> None:
    assert CREDIT_TX_RETENTION_DAYS.whole(value) == taken


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (3_000_000, "3000000 is out of bounds"),
        (0, "0 is out of bounds"),
        (-1, "-1 is out of bounds"),
        # str() of a 5,001-digit int raises (CPython's limit): the message counts its digits.
        pytest.param(10**5000, "(5001 digits) is out of bounds", id="huge-int"),
        pytest.param("9" * 5000, "'9999999999999999999...(5002 characters) is out of bounds", id="huge-str"),
        ("3.5", "'3.5' has too many decimals"),
        ("ninety", "'ninety' is not a plain number"),
        ("1e3", "'1e3' is not a plain number"),
        ("NaN", "'NaN' is not a plain number"),
        (Decimal("NaN"), "NaN is out of bounds"),
        (Decimal("Infinity"), "Infinity is out of bounds"),
        (True, "True is not a plain number"),
        (30.0, "30.0 is not a plain number"),
        (None, "None is not a plain number"),
    ],
)
def test_anything_else_is_refused_saying_the_bounds(value: object, why: str) -> None:
    with pytest.raises(BoundError) as refused:
        CREDIT_TX_RETENTION_DAYS.whole(value)
    assert str(refused.value) == (
        f"credit-transaction retention {why}; it must be a whole number from 1 to 3650 days"
    )


def test_an_amount_keeps_its_decimals_within_the_places() -> None:
    assert SPEND_CAP_USD.check("12.50") == Decimal("12.50")
    assert SPEND_CAP_USD.check("999999999.999999") == Decimal("999999999.999999")
    assert str(SPEND_CAP_USD.check(Decimal("1E+3"))) == "1000"
    with pytest.raises(BoundError, match="has too many decimals"):
        SPEND_CAP_USD.check("0.0000001")


def test_a_stored_value_outside_the_bounds_is_logged_and_read_as_absent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert stored(TENANT_MAX_RUNNING, None, where="u/PROFILE.max_running", fallback="x") is None
    assert stored(TENANT_MAX_RUNNING, Decimal(3), where="u/PROFILE.max_running", fallback="x") == 3
    assert caplog.records == []
    assert stored(TENANT_MAX_RUNNING, "lots", where="u/PROFILE.max_running", fallback="the default") is None
    (record,) = caplog.records
    assert (record.levelname, record.getMessage()) == ("ERROR", INVALID_STORED)
    assert (record.config, record.fallback) == ("u/PROFILE.max_running", "the default")  # type: ignore[attr-defined]
    assert "running cap 'lots' is not a plain number" in record.error  # type: ignore[attr-defined]


def test_the_configuration_page_says_each_bound() -> None:
    text = CONFIGURATION.read_text()
    table = text[text.index("## Bounds of what operators set") :]
    table = table[: table.index("\n## ")]
    for option, bound in BOUNDS.items():
        command, _, flag = option.partition(" --") if " --" in option else (option, "", "")
        rows = [line for line in table.splitlines() if line.startswith(f"| `aijobs {command.split()[0]}")]
        row = next(line for line in rows if (f"--{flag}" if flag else "AMOUNT") in line)
        assert f"{bound.low}-{bound.high} {bound.unit}" in row, (option, row)


def test_the_stage_keys_share_the_bounds_of_what_operators_set() -> None:
    key = INT_KEYS["TENANT_MAX_RUNNING"]
    assert (key.low, key.high) == (int(TENANT_MAX_RUNNING.low), int(TENANT_MAX_RUNNING.high))
    base = {"QUEUE_NAMES": "summary", "PROVIDER": "local"}
    assert parse_stage_config("t", {**base, "SPEND_DAILY_CAP_USD": "999999999.999999"}).spend_daily_cap_usd
    with pytest.raises(ConfigError, match="out of bounds"):
        parse_stage_config("t", {**base, "SPEND_DAILY_CAP_USD": "1000000000"})
