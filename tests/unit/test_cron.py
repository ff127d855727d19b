"""Classic 5-field cron parsing and its EventBridge Scheduler `cron(...)` translation."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aijobs.cron import CronError, CronExpression, parse_cron

# (low, high) of each field of the AWS 6-field expression, in AWS numbering (day-of-week 1 = Sunday).
_AWS_BOUNDS = {
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (1, 7),
}
_AWS_CRON = re.compile(r"^cron\((\S+) (\S+) (\S+) (\S+) (\S+) \*\)$")
_AWS_ITEM = re.compile(r"^(\*|\d+(?:-\d+)?)(?:/(\d+))?$")
_MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_DOW_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def _expand_aws(field: str, low: int, high: int) -> set[int]:
    """Expand one AWS cron field (`*`, `a`, `a-b`, `a/b`, `*/b`, lists) with AWS semantics:
    `a/b` runs from `a` to the end of the field."""
    values: set[int] = set()
    for item in field.split(","):
        match = _AWS_ITEM.match(item)
        assert match, f"AWS field {field!r} has an item {item!r} this expander does not know"
        base, step_text = match.group(1), match.group(2)
        step = int(step_text) if step_text else 1
        assert step >= 1, field
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, last = base.split("-")
            start, end = int(first), int(last)
            assert start <= end, f"AWS range {item!r} runs backwards"
        else:
            start = int(base)
            end = high if step_text else start
        assert low <= start <= high, f"{item!r} starts outside {low}-{high}"
        assert low <= end <= high, f"{item!r} ends outside {low}-{high}"
        values.update(range(start, end + 1, step))
    return values


def _aws_fields(expression: CronExpression) -> dict[str, str]:
    match = _AWS_CRON.match(expression.to_aws())
    assert match, expression.to_aws()
    return dict(zip(_AWS_BOUNDS, match.groups(), strict=True))


# --- translation table ---------------------------------------------------------------------------

VALID = [
    ("*/10 * * * *", "cron(0/10 * * * ? *)"),
    ("0 9 * * 1-5", "cron(0 9 ? * 2-6 *)"),
    ("0 0 * * 0", "cron(0 0 ? * 1 *)"),
    ("0 0 * * 7", "cron(0 0 ? * 1 *)"),
    ("0 0 * * SUN", "cron(0 0 ? * 1 *)"),
    ("0 0 * * FRI-SUN", "cron(0 0 ? * 1,6,7 *)"),
    ("0 0 * * sat-sun", "cron(0 0 ? * 1,7 *)"),
    ("0 0 * * sun", "cron(0 0 ? * 1 *)"),
    ("0 0 * * 0,7", "cron(0 0 ? * 1 *)"),
    ("0 0 * * MON-FRI", "cron(0 0 ? * 2-6 *)"),
    ("0 0 * * mon-Fri", "cron(0 0 ? * 2-6 *)"),
    ("0 0 * * SAT", "cron(0 0 ? * 7 *)"),
    # Fri..Sun wraps round the AWS week: 6, 7 and 1.
    ("0 0 * * 5-7", "cron(0 0 ? * 1,6,7 *)"),
    # AWS day-of-week has no step syntax: the step is expanded.
    ("0 0 * * */2", "cron(0 0 ? * 1,3,5,7 *)"),
    ("0 0 * * 1-5/2", "cron(0 0 ? * 2,4,6 *)"),
    ("0 0 * * 1,3,5", "cron(0 0 ? * 2,4,6 *)"),
    # Every day spelled out on day-of-week: day-of-month still gets the '?'.
    ("0 0 * * 0-6", "cron(0 0 ? * * *)"),
    ("0 12 1 * *", "cron(0 12 1 * ? *)"),
    ("0 0 1 JAN,JUL *", "cron(0 0 1 1/6 ? *)"),
    ("0 0 1 jan,jul *", "cron(0 0 1 1/6 ? *)"),
    ("0 0 1 JAN-MAR *", "cron(0 0 1 1-3 ? *)"),
    ("0 0 1 1,2 *", "cron(0 0 1 1,2 ? *)"),
    ("30 2 */2 * *", "cron(30 2 1/2 * ? *)"),
    ("0 0 1-31 * *", "cron(0 0 * * ? *)"),
    ("0 0 1-5 * *", "cron(0 0 1-5 * ? *)"),
    # 15,45 is the progression 15/30 (15 + 30 runs past 59).
    ("15,45 * * * *", "cron(15/30 * * * ? *)"),
    # Stops at 30, so `0/10` (which runs to 50) would be wrong: a list.
    ("0-30/10 * * * *", "cron(0,10,20,30 * * * ? *)"),
    ("5/15 * * * *", "cron(5/15 * * * ? *)"),
    ("0-59/20 * * * *", "cron(0/20 * * * ? *)"),
    ("1,2,3,10 * * * *", "cron(1-3,10 * * * ? *)"),
    ("0,30 * * * *", "cron(0/30 * * * ? *)"),
    ("0,20 * * * *", "cron(0,20 * * * ? *)"),
    ("58/5 * * * *", "cron(58 * * * ? *)"),
    ("*/1 * * * *", "cron(* * * * ? *)"),
    ("0 */6 * * *", "cron(0 0/6 * * ? *)"),
    ("0 9-17 * * *", "cron(0 9-17 * * ? *)"),
    ("0 0,12 * * *", "cron(0 0/12 * * ? *)"),
    ("* * * * *", "cron(* * * * ? *)"),
]


@pytest.mark.parametrize(("text", "aws"), VALID)
def test_to_aws(text: str, aws: str) -> None:
    assert parse_cron(text).to_aws() == aws


@pytest.mark.parametrize("text", [text for text, _ in VALID])
def test_aws_fields_expand_back_to_the_parsed_sets(text: str) -> None:
    expression = parse_cron(text)
    fields = _aws_fields(expression)
    assert _expand_aws(fields["minute"], *_AWS_BOUNDS["minute"]) == expression.minutes
    assert _expand_aws(fields["hour"], *_AWS_BOUNDS["hour"]) == expression.hours
    assert _expand_aws(fields["month"], *_AWS_BOUNDS["month"]) == expression.months
    # Exactly one day field is '?': the one classic cron left as '*'.
    if expression.day_of_week_any:
        assert fields["day-of-week"] == "?"
        assert _expand_aws(fields["day-of-month"], 1, 31) == expression.days_of_month
    else:
        assert fields["day-of-month"] == "?"
        assert "/" not in fields["day-of-week"]
        aws_days = _expand_aws(fields["day-of-week"], 1, 7)
        assert {day - 1 for day in aws_days} == expression.days_of_week


@pytest.mark.parametrize(
    ("classic", "aws"),
    [
        ("0", "1"),
        ("1", "2"),
        ("2", "3"),
        ("3", "4"),
        ("4", "5"),
        ("5", "6"),
        ("6", "7"),
        ("7", "1"),
        *[(name, str(number + 1)) for number, name in enumerate(_DOW_NAMES)],
        *[(name.lower(), str(number + 1)) for number, name in enumerate(_DOW_NAMES)],
    ],
)
def test_each_day_of_week_maps_to_the_sunday_first_aws_number(classic: str, aws: str) -> None:
    assert parse_cron(f"0 0 * * {classic}").to_aws() == f"cron(0 0 ? * {aws} *)"


@pytest.mark.parametrize(("name", "number"), [(name, n) for n, name in enumerate(_MONTH_NAMES, start=1)])
def test_each_month_name_maps_to_its_number(name: str, number: int) -> None:
    assert parse_cron(f"0 0 1 {name} *").months == {number}
    assert parse_cron(f"0 0 1 {name.lower()} *").months == {number}
    assert parse_cron(f"0 0 1 {name.capitalize()} *").to_aws() == f"cron(0 0 1 {number} ? *)"


# --- parsed values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "attribute", "expected"),
    [
        ("0 0 * * 7", "days_of_week", {0}),
        ("0 0 * * 0", "days_of_week", {0}),
        ("0 0 * * 0,7", "days_of_week", {0}),
        ("0 0 * * 5-7", "days_of_week", {5, 6, 0}),
        ("0 0 * * */2", "days_of_week", {0, 2, 4, 6}),
        ("0 0 * * MON-FRI", "days_of_week", {1, 2, 3, 4, 5}),
        ("0 0 * * *", "days_of_week", {0, 1, 2, 3, 4, 5, 6}),
        ("0 9 * * 1-5", "hours", {9}),
        ("0 9 * * 1-5", "minutes", {0}),
        ("0-30/10 * * * *", "minutes", {0, 10, 20, 30}),
        ("5/15 * * * *", "minutes", {5, 20, 35, 50}),
        ("*/10 * * * *", "minutes", {0, 10, 20, 30, 40, 50}),
        ("15,45 * * * *", "minutes", {15, 45}),
        ("0 */6 * * *", "hours", {0, 6, 12, 18}),
        ("30 2 */2 * *", "days_of_month", set(range(1, 32, 2))),
        ("0 0 1 JAN,JUL *", "months", {1, 7}),
        ("0 0 1 * *", "months", set(range(1, 13))),
        ("* * * * *", "minutes", set(range(60))),
        ("07 08 09 10 *", "minutes", {7}),
        ("07 08 09 10 *", "hours", {8}),
        ("07 08 09 10 *", "days_of_month", {9}),
        ("07 08 09 10 *", "months", {10}),
    ],
)
def test_parsed_value_sets(text: str, attribute: str, expected: set[int]) -> None:
    assert getattr(parse_cron(text), attribute) == expected


@pytest.mark.parametrize(
    ("text", "dom_any", "dow_any"),
    [
        ("* * * * *", True, True),
        ("0 0 1 * *", False, True),
        ("0 0 * * 1", True, False),
        ("0 0 1-31 * *", False, True),
        ("0 0 */1 * *", False, True),
    ],
)
def test_day_field_wildcard_flags(text: str, dom_any: bool, dow_any: bool) -> None:
    expression = parse_cron(text)
    assert expression.day_of_month_any is dom_any
    assert expression.day_of_week_any is dow_any


@pytest.mark.parametrize(
    "text",
    ["*/10 * * * *", "  0  9 * *\t1-5  ", "0 0 * * mon-fri", "0 0 1 jan,Jul *", "15,45 * * * *"],
)
def test_text_keeps_the_exact_original_string(text: str) -> None:
    expression = parse_cron(text)
    assert expression.text == text
    # Extra whitespace does not change the meaning.
    assert expression.to_aws() == parse_cron(" ".join(text.split()).upper()).to_aws()


def test_expressions_are_frozen_values() -> None:
    first, second = parse_cron("0 9 * * 1-5"), parse_cron("0 9 * * 1-5")
    assert first == second
    assert hash(first) == hash(second)
    assert parse_cron("0 0 * * 0") != parse_cron("0 0 * * 7")  # same schedule, different handler key
    with pytest.raises(AttributeError):
        first.text = "x"  # type: ignore[misc]


# --- rejected input ------------------------------------------------------------------------------

REJECTED = [
    # Wrong number of fields.
    ("0 0 * *", r"exactly 5 fields .*found 4"),
    ("0 0 * * * *", r"exactly 5 fields .*found 6"),
    ("0 0 * * * 2030", r"exactly 5 fields .*found 6"),
    ("", r"exactly 5 fields .*found 0"),
    ("   ", r"exactly 5 fields .*found 0"),
    ("@hourly", r"exactly 5 fields .*found 1"),
    ("@daily", r"exactly 5 fields .*found 1"),
    ("@reboot", r"exactly 5 fields .*found 1"),
    # Both day fields restricted: classic OR semantics that AWS cannot express.
    ("0 0 1 * 1", r"restricts both day-of-month and day-of-week"),
    ("0 0 1 * MON", r"restricts both day-of-month and day-of-week"),
    ("0 0 */2 * 1-5", r"restricts both day-of-month and day-of-week"),
    ("0 0 1-31 * 0-7", r"restricts both day-of-month and day-of-week"),
    # Values outside the field.
    ("60 * * * *", r"minute value 60 is outside 0-59"),
    ("0 24 * * *", r"hour value 24 is outside 0-23"),
    ("0 0 0 * *", r"day-of-month value 0 is outside 1-31"),
    ("0 0 32 * *", r"day-of-month value 32 is outside 1-31"),
    ("0 0 * 13 *", r"month value 13 is outside 1-12"),
    ("0 0 * 0 *", r"month value 0 is outside 1-12"),
    ("0 0 * * 8", r"day-of-week value 8 is outside 0-7"),
    ("0-60 * * * *", r"minute value 60 is outside 0-59"),
    ("0 0 * * 1-8", r"day-of-week value 8 is outside 0-7"),
    ("99999999999999999999 * * * *", r"minute value 99999999999999999999 is outside 0-59"),
    # Backwards ranges.
    ("0 0 * * 5-1", r"day-of-week range '5-1' runs backwards"),
    ("0 0 * * FRI-MON", r"day-of-week range 'FRI-MON' runs backwards"),
    ("30-10 * * * *", r"minute range '30-10' runs backwards"),
    ("0 0 * DEC-JAN *", r"month range 'DEC-JAN' runs backwards"),
    # Steps that are zero or wider than the field.
    ("*/0 * * * *", r"minute step '0' is out of range"),
    ("*/61 * * * *", r"minute step '61' is out of range"),
    ("0 */25 * * *", r"hour step '25' is out of range"),
    ("0 0 */32 * *", r"day-of-month step '32' is out of range"),
    ("0 0 1 */13 *", r"month step '13' is out of range"),
    ("0 0 * * 1-5/0", r"day-of-week step '0' is out of range"),
    ("5/0 * * * *", r"minute step '0' is out of range"),
    # Unknown names, and names used in a field they do not belong to.
    ("0 0 * FOO *", r"month value 'FOO' is not a number or name"),
    ("0 0 * JAN-FOO *", r"month value 'FOO' is not a number or name"),
    ("0 0 * * FOO", r"day-of-week value 'FOO' is not a number or name"),
    ("0 0 * * SUNDAY", r"day-of-week value 'SUNDAY' is not a number or name"),
    ("0 0 * * JAN", r"day-of-week value 'JAN' is not a number or name"),
    ("0 0 * MON *", r"month value 'MON' is not a number or name"),
    ("MON * * * *", r"minute value 'MON' is not a number or name"),
    ("0 0 JAN * *", r"day-of-month value 'JAN' is not a number or name"),
    # Quartz/AWS-only tokens: L, W, #, ?.
    ("0 0 L * *", r"day-of-month value 'L' is not a number or name"),
    ("0 0 15W * *", r"day-of-month value '15W' is not a number or name"),
    ("0 0 LW * *", r"day-of-month value 'LW' is not a number or name"),
    ("0 0 * * 5L", r"day-of-week value '5L' is not a number or name"),
    ("0 0 * * L", r"day-of-week value 'L' is not a number or name"),
    ("0 0 * * 5#2", r"day-of-week item '5#2' is not valid"),
    ("0 0 * * MON#1", r"day-of-week item 'MON#1' is not valid"),
    ("0 0 ? * *", r"day-of-month item '\?' is not valid"),
    ("0 0 * * ?", r"day-of-week item '\?' is not valid"),
    ("? * * * *", r"minute item '\?' is not valid"),
    # `?` with a restricted day-of-week is refused too (currently by the both-day-fields rule).
    ("0 0 ? * 1", r"day-of-month"),
    # Malformed items.
    ("1,,2 * * * *", r"minute item '' is not valid"),
    ("1, * * * *", r"minute item '' is not valid"),
    ("-5 * * * *", r"minute item '-5' is not valid"),
    ("5- * * * *", r"minute item '5-' is not valid"),
    ("*/ * * * *", r"minute item '\*/' is not valid"),
    ("1/2/3 * * * *", r"minute item '1/2/3' is not valid"),
    ("1-2-3 * * * *", r"minute item '1-2-3' is not valid"),
    ("0.5 * * * *", r"minute item '0.5' is not valid"),
    ("*/-1 * * * *", r"minute item '\*/-1' is not valid"),
    ("0 0 * * 1-*", r"day-of-week item '1-\*' is not valid"),
]


@pytest.mark.parametrize(("text", "message"), REJECTED)
def test_rejected(text: str, message: str) -> None:
    with pytest.raises(CronError, match=message) as caught:
        parse_cron(text)
    # Every message quotes the whole expression so a person can find it in the config.
    assert repr(text) in str(caught.value)


def test_cron_error_is_a_value_error() -> None:
    assert issubclass(CronError, ValueError)


# --- properties ----------------------------------------------------------------------------------


@st.composite
def _field_item(draw: st.DrawFn, low: int, high: int, names: tuple[str, ...] = ()) -> tuple[str, set[int]]:
    """One classic item (`*`, `a`, `a-b`, each optionally `/step`) and the values it selects,
    computed independently of the module under test."""

    def spell(value: int) -> str:
        if value - low < len(names) and draw(st.booleans()):
            name = names[value - low]
            return draw(st.sampled_from([name, name.lower(), name.capitalize()]))
        return str(value)

    kind = draw(st.sampled_from(["star", "single", "range"]))
    step = draw(st.none() | st.integers(1, high - low + 1))
    if kind == "star":
        text, start, end = "*", low, high
    elif kind == "single":
        start = draw(st.integers(low, high))
        end = high if step is not None else start
        text = spell(start)
    else:
        start = draw(st.integers(low, high))
        end = draw(st.integers(start, high))
        end_text = spell(end)
        if end_text.upper() == "SUN":
            end = 7  # Sunday closing a range (`FRI-SUN`) counts as 7
        text = f"{spell(start)}-{end_text}"
    if step is not None:
        text += f"/{step}"
    return text, set(range(start, end + 1, step or 1))


def _join(parts: list[tuple[str, set[int]]]) -> tuple[str, set[int]]:
    values: set[int] = set()
    for _, selected in parts:
        values |= selected
    return ",".join(text for text, _ in parts), values


def _field_spec(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[tuple[str, set[int]]]:
    """A comma list of 1-4 items and the union of the values they select."""
    return st.lists(_field_item(low, high, names), min_size=1, max_size=4).map(_join)


@settings(max_examples=300)
@given(_field_spec(0, 59))
def test_minute_field_round_trips_through_aws_semantics(spec: tuple[str, set[int]]) -> None:
    text, expected = spec
    expression = parse_cron(f"{text} * * * *")
    assert expression.minutes == expected
    minute = _aws_fields(expression)["minute"]
    assert _expand_aws(minute, 0, 59) == expected


@settings(max_examples=300)
@given(_field_spec(0, 7, tuple(_DOW_NAMES)))
def test_day_of_week_field_round_trips_through_aws_semantics(spec: tuple[str, set[int]]) -> None:
    text, classic = spec
    expected = {day % 7 for day in classic}  # 7 is Sunday as well as 0
    expression = parse_cron(f"0 0 * * {text}")
    assert expression.days_of_week == expected
    fields = _aws_fields(expression)
    if text == "*":
        # A bare `*` leaves day-of-week unrestricted: the '?' goes there instead.
        assert (fields["day-of-month"], fields["day-of-week"]) == ("*", "?")
        return
    assert fields["day-of-month"] == "?"
    assert "/" not in fields["day-of-week"]
    aws_days = _expand_aws(fields["day-of-week"], 1, 7)
    assert {day - 1 for day in aws_days} == expected


@pytest.mark.parametrize(
    ("template", "field", "names"),
    [
        ("0 {} * * *", "hour", ()),
        ("0 0 {} * *", "day-of-month", ()),
        ("0 0 1 {} *", "month", tuple(_MONTH_NAMES)),
    ],
)
@settings(max_examples=150)
@given(data=st.data())
def test_other_fields_round_trip_through_aws_semantics(
    template: str, field: str, names: tuple[str, ...], data: st.DataObject
) -> None:
    low, high = _AWS_BOUNDS[field]
    text, expected = data.draw(_field_spec(low, high, names))
    expression = parse_cron(template.format(text))
    assert _expand_aws(_aws_fields(expression)[field], low, high) == expected


@pytest.mark.parametrize(
    ("text", "moment", "fires"),
    [
        ("*/10 * * * *", "2026-11-29T09:10:00", True),
        ("*/10 * * * *", "2026-11-29T09:15:00", False),
        ("0 9 * * 1-5", "2026-11-30T09:00:30", True),  # a Monday
        ("0 9 * * 1-5", "2026-11-29T09:00:00", False),  # a Sunday
        ("0 0 * * 0", "2026-11-29T00:00:00", True),
        ("0 0 * * 7", "2026-11-29T00:00:00", True),
        ("30 2 1 * *", "2026-12-01T02:30:00", True),
        ("30 2 1 * *", "2026-12-02T02:30:00", False),
    ],
)
def test_matches_uses_classic_cron_semantics(text: str, moment: str, fires: bool) -> None:
    from datetime import UTC, datetime

    assert parse_cron(text).matches(datetime.fromisoformat(moment).replace(tzinfo=UTC)) is fires
