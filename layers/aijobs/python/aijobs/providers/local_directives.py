"""The local provider's magic directives: the leading `#fail:` / `#outage` / `#running:` /
`#sleep:` / `#crash` / `#cost:` words of a line of the input text, parsed into `Directives` (what
`LocalProvider` then simulates: failures, slow or pending answers, crashes, a reported cost), and
`SimulatedCrash`, the `#crash` that kills an attempt like a Lambda timeout."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aijobs.errors import InvalidInputError
from aijobs.providers.base import Call

_MAX_SLEEP_SECONDS = 30.0

_DIRECTIVE = re.compile(r"^#(fail|running|sleep|crash|cost):(.*)$", re.IGNORECASE | re.DOTALL)
_FAIL_VALUE = re.compile(
    r"^(502|503|429|timeout|400|401|403|413|eol)(?:x(\d{1,6}))?(?:@([a-z0-9][a-z0-9._:-]{0,99}))?$"
)
_COUNT_VALUE = re.compile(r"^\d{1,6}$")
_SECONDS_VALUE = re.compile(r"^\d{1,3}(?:\.\d{1,6})?$")
_USD_VALUE = re.compile(r"^\d{1,6}(?:\.\d{1,6})?$")


class SimulatedCrash(BaseException):
    """`#crash`: the attempt dies like a Lambda killed by its timeout or memory limit.

    A `BaseException` on purpose: the batch processor and the consumer catch only `Exception`,
    so the whole invocation dies without updating the row or answering the batch. The claimed
    row keeps its lease until it expires; the messages reappear after their visibility timeout.
    Only the local stack's mapping emulator (aijobs_cli.local.esm) catches it, as a failed invocation.
    """


@dataclass(frozen=True)
class Fail:
    code: str
    # The failure happens while `attempt <= times`; None means on every attempt.
    times: int | None
    # `#outage`: an outage that an operator's re-run comes after (fails only before any re-run).
    until_rerun: bool = False
    # `@MODEL`: only calls on this model fail (a fallback model answers).
    model: str | None = None


@dataclass(frozen=True)
class Directives:
    fails: tuple[Fail, ...] = ()
    running: int | None = None
    sleeps: tuple[float, ...] = ()
    # `#crash` / `#crash:N`: the attempt dies (SimulatedCrash) while `attempt <= crash`.
    crash: int | None = None
    # `#cost:USD`: the cost a succeeded job reports (the spend brake counts it); else 0.
    cost: float | None = None


def _malformed(token: str) -> InvalidInputError:
    return InvalidInputError(f"malformed local-provider directive {token[:40]!r}", status=400)


def end_of_life(call: Call) -> Exception:
    """`#fail:eol`: Bedrock's answer for a model past its end of life, mapped as Bedrock's is."""
    from botocore.exceptions import ClientError

    from aijobs.providers.failures import BEDROCK_END_OF_LIFE_MESSAGE, aws_failure

    answer: Any = {
        "Error": {"Code": "ResourceNotFoundException", "Message": BEDROCK_END_OF_LIFE_MESSAGE},
        "ResponseMetadata": {"HTTPStatusCode": 404},
    }
    model = call.model
    return aws_failure(ClientError(answer, "InvokeModel"), service="local provider", model=model)


def _parse_fail(token: str, value: str) -> Fail:
    match = _FAIL_VALUE.match(value)
    if match is None:
        raise _malformed(token)
    times = match.group(2)
    return Fail(code=match.group(1), times=int(times) if times is not None else None, model=match.group(3))


def _parse_seconds(token: str, value: str) -> float:
    if _SECONDS_VALUE.match(value) is None:
        raise _malformed(token)
    seconds = float(value)
    if seconds > _MAX_SLEEP_SECONDS:
        raise _malformed(token)
    return seconds


def _split_directives(text: str) -> tuple[Directives, str]:
    """Split the leading `#fail:`/`#running:`/`#sleep:`/`#crash`/`#cost:` directives off `text`.

    Parsing stops at the first leading word that is not a directive (an ordinary `#hashtag`
    included), which stays part of the text. A malformed directive raises `InvalidInputError`.
    """
    fails: list[Fail] = []
    sleeps: list[float] = []
    running: int | None = None
    crash: int | None = None
    cost: float | None = None
    rest = text.lstrip()
    while rest.startswith("#"):
        parts = rest.split(maxsplit=1)
        token = parts[0]
        if token.lower() in ("#outage", "#crash"):
            if token.lower() == "#outage":
                fails.append(Fail(code="503", times=None, until_rerun=True))
            else:  # plain `#crash`: the first attempt only
                crash = max(crash or 0, 1)
            rest = parts[1] if len(parts) > 1 else ""
            continue
        match = _DIRECTIVE.match(token)
        if match is None:
            break
        name, value = match.group(1).lower(), match.group(2).lower()
        if name == "fail":
            fails.append(_parse_fail(token, value))
        elif name == "sleep":
            sleeps.append(_parse_seconds(token, value))
        elif name == "cost":
            if _USD_VALUE.match(value) is None:
                raise _malformed(token)
            cost = float(value)
        elif _COUNT_VALUE.match(value) is None:
            raise _malformed(token)
        elif name == "crash":
            crash = max(crash or 0, int(value))
        else:
            running = max(running or 0, int(value))
        rest = parts[1] if len(parts) > 1 else ""
    return Directives(tuple(fails), running, tuple(sleeps), crash, cost), rest


def _merge(first: Directives, second: Directives) -> Directives:
    def larger(a: int | None, b: int | None) -> int | None:
        return b if a is None else a if b is None else max(a, b)

    return Directives(
        fails=first.fails + second.fails,
        running=larger(first.running, second.running),
        sleeps=first.sleeps + second.sleeps,
        crash=larger(first.crash, second.crash),
        cost=second.cost if second.cost is not None else first.cost,
    )


def directives_of(text: str) -> tuple[Directives, str]:
    """The directives that open any line of `text` (a kind's template may put text before the
    job's input), and the text without them."""
    found = Directives()
    lines = []
    for line in text.split("\n"):
        if line.lstrip().startswith("#"):
            directives, line = _split_directives(line)
            found = _merge(found, directives)
        lines.append(line)
    return found, "\n".join(lines)
