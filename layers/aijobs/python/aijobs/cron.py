"""Five-field cron expressions (the `CRONS` setting) and their EventBridge Scheduler form.

`CRONS` holds classic 5-field expressions (`minute hour day-of-month month day-of-week`), and the
exact text is the key of `SCHEDULED_HANDLERS`. AWS wants a 6-field `cron(...)` with a year, a `?`
in one of the two day fields, and Sunday-first day-of-week numbers (1 = Sunday). The translation
works on the *sets* of values each field selects, so names, ranges, steps and lists all map the
same way, and an expression AWS cannot express is rejected with a message instead of being
approximated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"], start=1
    )
}
_DOW_NAMES = {name: number for number, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_TOKEN = re.compile(r"(?P<range>\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>[0-9]+))?", re.ASCII)


class CronError(ValueError):
    """A cron expression that is malformed or cannot run on EventBridge Scheduler."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


_MINUTE = _Field("minute", 0, 59, {})
_HOUR = _Field("hour", 0, 23, {})
_DOM = _Field("day-of-month", 1, 31, {})
_MONTH = _Field("month", 1, 12, _MONTH_NAMES)
# 0 and 7 both mean Sunday in classic cron.
_DOW = _Field("day-of-week", 0, 7, _DOW_NAMES)


@dataclass(frozen=True)
class CronExpression:
    """A validated 5-field expression; `text` is the exact configured string (the handler key)."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]  # 0 = Sunday ... 6 = Saturday
    day_of_month_any: bool
    day_of_week_any: bool

    def matches(self, moment: datetime) -> bool:
        """Whether the expression fires in the minute of `moment` (UTC), classic cron semantics.

        One day field is always `*` (parse_cron refuses both), so both day conditions must hold.
        """
        utc = moment.astimezone(UTC)
        return (
            utc.minute in self.minutes
            and utc.hour in self.hours
            and utc.month in self.months
            and utc.day in self.days_of_month
            and utc.isoweekday() % 7 in self.days_of_week
        )

    def to_aws(self) -> str:
        """The EventBridge Scheduler `cron(min hour dom month dow year)` expression (UTC)."""
        minute = _render(self.minutes, _MINUTE, allow_step=True)
        hour = _render(self.hours, _HOUR, allow_step=True)
        month = _render(self.months, _MONTH, allow_step=True)
        if self.day_of_week_any:
            dom = _render(self.days_of_month, _DOM, allow_step=True)
            dow = "?"
        else:
            dom = "?"
            # AWS numbers days 1 (Sunday) .. 7 (Saturday) and has no step syntax for this field.
            aws_days = frozenset(day + 1 for day in self.days_of_week)
            dow = _render(aws_days, _Field("day-of-week", 1, 7, {}), allow_step=False)
        return f"cron({minute} {hour} {dom} {month} {dow} *)"


def parse_cron(text: str) -> CronExpression:
    """Parse and validate a 5-field cron expression; raises `CronError` naming the problem."""
    parts = text.split()
    if len(parts) != 5:
        raise CronError(
            f"cron expression {text!r} must have exactly 5 fields "
            f"(minute hour day-of-month month day-of-week), found {len(parts)}"
        )
    minute, hour, dom, month, dow = parts
    expression = CronExpression(
        text=text,
        minutes=_parse_field(minute, _MINUTE, text),
        hours=_parse_field(hour, _HOUR, text),
        days_of_month=_parse_field(dom, _DOM, text),
        months=_parse_field(month, _MONTH, text),
        days_of_week=frozenset(day % 7 for day in _parse_field(dow, _DOW, text)),
        # Classic cron treats a day field as unrestricted only when it is written `*`.
        day_of_month_any=dom == "*",
        day_of_week_any=dow == "*",
    )
    if not expression.day_of_month_any and not expression.day_of_week_any:
        raise CronError(
            f"cron expression {text!r} restricts both day-of-month and day-of-week; classic cron runs "
            "when either matches, which AWS cron (one of the two must be '?') cannot express: "
            "use two expressions or restrict only one of the fields"
        )
    return expression


def _parse_field(raw: str, field: _Field, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in raw.split(","):
        match = _TOKEN.fullmatch(item)
        if not match:
            raise CronError(f"cron expression {text!r}: {field.name} item {item!r} is not valid")
        range_part, step_part = match.group("range"), match.group("step")
        if range_part == "*":
            start, end = field.low, field.high
        elif "-" in range_part:
            first, last = range_part.split("-", 1)
            start, end = _value(first, field, text), _value(last, field, text)
            if field is _DOW and last.upper() == "SUN":
                end = 7  # `FRI-SUN`: Sunday closes a range as 7
            if start > end:
                raise CronError(f"cron expression {text!r}: {field.name} range {range_part!r} runs backwards")
        else:
            start = _value(range_part, field, text)
            # `5/15` means "from 5 to the end of the field, every 15".
            end = field.high if step_part else start
        step = 1
        if step_part is not None:
            step = int(step_part)
            if step < 1 or step > field.high - field.low + 1:
                raise CronError(f"cron expression {text!r}: {field.name} step {step_part!r} is out of range")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _value(token: str, field: _Field, text: str) -> int:
    upper = token.upper()
    if upper in field.names:
        return field.names[upper]
    if not (token.isascii() and token.isdigit()):
        raise CronError(f"cron expression {text!r}: {field.name} value {token!r} is not a number or name")
    number = int(token)
    if not field.low <= number <= field.high:
        raise CronError(
            f"cron expression {text!r}: {field.name} value {number} is outside {field.low}-{field.high}"
        )
    return number


def _render(values: frozenset[int], field: _Field, *, allow_step: bool) -> str:
    ordered = sorted(values)
    if ordered == list(range(field.low, field.high + 1)):
        return "*"
    if allow_step and len(ordered) >= 2:
        step = ordered[1] - ordered[0]
        # AWS `start/step` runs to the end of the field, so it only fits progressions that do too.
        is_progression = ordered == list(range(ordered[0], ordered[-1] + 1, step))
        if step > 1 and is_progression and ordered[-1] + step > field.high:
            return f"{ordered[0]}/{step}"
    return _render_list(ordered)


def _render_list(ordered: list[int]) -> str:
    items: list[str] = []
    run: list[int] = []
    for value in [*ordered, -2]:
        if run and value == run[-1] + 1:
            run.append(value)
            continue
        if len(run) >= 3:
            items.append(f"{run[0]}-{run[-1]}")
        else:
            items.extend(str(number) for number in run)
        run = [value]
    return ",".join(items)
