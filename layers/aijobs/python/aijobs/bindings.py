"""What a function reads of the stage configuration from its environment: the list format, the
queue binding names and the `kind=value` maps the stack writes (aijobs_cdk.stage_config derives them).

Kept apart from the stage config's parser, which only `cdk synth` and the local stack run, so a
function's cold start does not import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# Lambda's SQS event-source mapping accepts MaximumConcurrency from 2 to 1000.
ESM_MAX_CONCURRENCY_MIN = 2
ESM_MAX_CONCURRENCY_MAX = 1000
# The dead-letter consumer's map of its queues: `DEAD_LETTER_QUEUES=kind=queue-name;...`. Functions
# never parse a kind out of a queue name: production queues have names CloudFormation generates
# (so a retained queue never blocks its replacement), and the local stack's are readable.
DEAD_LETTER_QUEUES = "DEAD_LETTER_QUEUES"
# The cron's map of the consumers' event-source mappings: `EVENT_SOURCE_MAPPINGS=kind=mapping-id;...`
# (UUIDs from the stack; the local stack's own ids). Empty with QUEUE_MAX_CONCURRENCY=1.
EVENT_SOURCE_MAPPINGS = "EVENT_SOURCE_MAPPINGS"

# The per-kind limits (the sweeper's and the DLQ consumer's attempt budget, the sweeper's lease, the
# adaptive-concurrency ceiling), which a kind's declaration may change:
# `KIND_LIMITS=kind=attempts:4,lease:90,ceiling:1000;...`.
KIND_LIMITS = "KIND_LIMITS"
# AUTH_MODE=jwt: the Cognito group whose members are operators (exactly this name, nothing like it),
# unless the stage sets JWT_OPERATOR_GROUP.
DEFAULT_JWT_OPERATOR_GROUP = "aijobs-operators"
_LIMIT_FIELDS = ("attempts", "lease", "ceiling")

_WHOLE_NUMBER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class KindLimits:
    """What the cron must know of one kind: its attempt budget, its lease, its concurrency ceiling
    (1: reserved concurrency 1, never adjusted)."""

    attempts: int
    lease: int
    ceiling: int

    def setting(self) -> str:
        return ",".join(f"{name}:{getattr(self, name)}" for name in _LIMIT_FIELDS)


def limits_setting(limits: dict[str, KindLimits]) -> str:
    return ";".join(f"{kind}={entry.setting()}" for kind, entry in limits.items())


def parse_limits(raw: str | None) -> dict[str, KindLimits]:
    """The KIND_LIMITS format back into {kind: KindLimits}; a malformed entry is a ConfigError."""
    limits: dict[str, KindLimits] = {}
    for entry in split_list(raw):
        kind, _, values = (part.strip() for part in entry.partition("="))
        fields = dict(part.strip().partition(":")[::2] for part in values.split(","))
        if (
            not kind
            or sorted(fields) != sorted(_LIMIT_FIELDS)
            or not all(_WHOLE_NUMBER.fullmatch(value) and int(value) >= 1 for value in fields.values())
        ):
            raise ConfigError(
                f"{KIND_LIMITS}: {entry!r} must be <kind>=attempts:N,lease:N,ceiling:N (whole numbers >= 1)"
            )
        limits[kind] = KindLimits(**{name: int(value) for name, value in fields.items()})
    return limits


class ConfigError(ValueError):
    """Invalid stage configuration; the message names the key and the bad entry."""


def split_list(raw: str | None) -> tuple[str, ...]:
    """Split a semicolon-separated value: entries trimmed, empties dropped, duplicates removed in order."""
    seen: dict[str, None] = {}
    for entry in (raw or "").split(";"):
        entry = entry.strip()
        if entry:
            seen.setdefault(entry, None)
    return tuple(seen)


def binding_name(queue_name: str) -> str:
    """`tts-generate` -> `Q_TTS_GENERATE`: the environment variable that holds the queue URL."""
    return "Q_" + re.sub(r"[^A-Z0-9]", "_", queue_name.upper())


def queue_name_of(url_or_arn: str) -> str:
    """The SQS queue name at the end of a queue URL (`.../name`) or ARN (`...:name`)."""
    return url_or_arn.rsplit("/", 1)[-1].rsplit(":", 1)[-1]


def parse_prices(raw: str | None) -> dict[str, int]:
    """`summary:1;video-generate:20` -> {"summary": 1, "video-generate": 20} (the KIND_PRICES format)."""
    prices: dict[str, int] = {}
    for entry in split_list(raw):
        kind, sep, amount = (part.strip() for part in entry.partition(":"))
        if not sep or not _WHOLE_NUMBER.fullmatch(amount) or int(amount) < 0:
            raise ConfigError(f"KIND_PRICES: {entry!r} must be <kind>:<credits> with a whole number >= 0")
        prices[kind] = int(amount)
    return prices


def time_zone(name: str) -> tzinfo:
    """An IANA time zone; ValueError with the name when this system does not know it."""
    if name in ("UTC", "Etc/UTC"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"SPEND_TIME_ZONE={name!r} is not an IANA time zone (e.g. UTC, Europe/Paris)"
        ) from None
