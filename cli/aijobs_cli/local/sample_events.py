"""Sample events generated from a stage's configuration, for `sam local invoke -e` and the tests.

Each job kind gets an SQS batch from its queue (`sqs-<kind>-batch.json`) and each cron the exact
input its EventBridge Scheduler schedule sends (`schedule-<handler>.json`), so a kind or cron a
team adds has its events without anyone writing them. The events that are not per kind or per
cron (the API's, the DLQ's, the webhook queue's) are written by hand and live in `events/`;
`write_events` puts both side by side (`aijobs events`, `make events`, and `aijobs sam-env`, which
names each stage's real queues).

The events are deterministic (ids derived from the kind or the expression), so regenerating them
changes nothing, and a test can seed the job rows a consumer event refers to.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aijobs.cron import CronExpression, parse_cron
from aijobs_cdk.stage_config import StageConfig, queue_resource_name

#: The hand-written events (API, DLQ, webhooks), next to the package in a checkout.
EVENTS_DIR = Path(__file__).resolve().parents[3] / "events"
#: Where `aijobs events` (and `aijobs sam-env`) write the events; gitignored.
DEFAULT_OUT = Path(".aijobs/events")
#: The user the sample job messages (and the hand-written events) name.
SAMPLE_USER = "user-demo"
#: Records per consumer event: a batch, so per-record acknowledgement shows.
RECORDS = 2
REGION = "us-east-1"
#: moto's account, also the account of the hand-written events.
ACCOUNT = "123456789012"
# When the sample messages were sent (epoch ms), and the moment a schedule event fires after: the
# tests' clock starts there (tests/integration/harness.py).
SENT_MS = 1_764_400_000_000
SCHEDULED_AFTER = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# The longest a 5-field expression can wait for its next firing (29 February) is under 8 years.
_SEARCH_DAYS = 8 * 366


def queue_arn(stage: str, kind: str, *, region: str = REGION, account: str = ACCOUNT) -> str:
    """The ARN of a kind's queue under its readable name (`aijobs-<stage>-<kind>`)."""
    return f"arn:aws:sqs:{region}:{account}:{queue_resource_name(stage, kind)}"


def sample_job_id(kind: str, index: int) -> str:
    """A ULID-shaped job id, the same every time for (kind, index): the time the batch was sent
    and 80 bits from a hash of the pair."""
    digest = int.from_bytes(hashlib.sha256(f"{kind}#{index}".encode()).digest()[:10], "big")
    value = (SENT_MS << 80) | digest
    chars = []
    for _ in range(26):
        value, rest = divmod(value, 32)
        chars.append(_CROCKFORD[rest])
    return "".join(reversed(chars))


def consumer_event(kind: str, arn: str, *, records: int = RECORDS) -> dict[str, Any]:
    """An SQS batch as the event-source mapping hands it to the consumer of `kind`'s queue `arn`:
    messages carrying references only (`jobId`, `userId`, `kind`), as the producer sends them."""
    region = arn.split(":")[3]
    stage_prefix = arn.rsplit(":", 1)[-1].removesuffix(f"-{kind}")
    batch = []
    for index in range(records):
        job_id = sample_job_id(kind, index)
        body = json.dumps({"jobId": job_id, "userId": SAMPLE_USER, "kind": kind}, separators=(",", ":"))
        message_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"aijobs-sample:{kind}:{index}"))
        batch.append(
            {
                "messageId": message_id,
                "receiptHandle": f"AQEB{message_id.replace('-', '')}example",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": str(SENT_MS),
                    "SenderId": f"AROAEXAMPLE:{stage_prefix}-ApiFunction",
                    "ApproximateFirstReceiveTimestamp": str(SENT_MS + 123),
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": region,
            }
        )
    return {"Records": batch}


def next_firing(cron: CronExpression, after: datetime = SCHEDULED_AFTER) -> datetime:
    """The first minute strictly after `after` in which `cron` fires (UTC)."""
    start = after.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    for offset in range(_SEARCH_DAYS):
        day = (start + timedelta(days=offset)).date()
        if not (
            day.month in cron.months
            and day.day in cron.days_of_month
            and day.isoweekday() % 7 in cron.days_of_week
        ):
            continue
        for hour in sorted(cron.hours):
            for minute in sorted(cron.minutes):
                moment = datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)
                if moment >= start:
                    return moment
    raise ValueError(f"cron {cron.text!r} never fires")


def schedule_event(expression: str) -> dict[str, Any]:
    """The input the expression's EventBridge Scheduler schedule sends the cron dispatcher (the
    Schedules construct's payload, with the scheduler's placeholders filled in)."""
    from aijobs.scheduled.dispatcher import PAYLOAD_CRON, PAYLOAD_EXECUTION_ID, PAYLOAD_SCHEDULED_TIME

    cron = parse_cron(expression)
    return {
        PAYLOAD_CRON: cron.text,
        PAYLOAD_SCHEDULED_TIME: next_firing(cron).strftime("%Y-%m-%dT%H:%M:%SZ"),
        PAYLOAD_EXECUTION_ID: str(uuid.uuid5(uuid.NAMESPACE_URL, f"aijobs-schedule:{cron.text}")),
    }


def consumer_event_name(kind: str) -> str:
    return f"sqs-{kind}-batch.json"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def schedule_event_names(expressions: Iterable[str]) -> dict[str, str]:
    """Expression -> its event's file name, after the handler registered for it
    (`run_maintenance` -> `schedule-maintenance.json`); a handler scheduled under several
    expressions (or without a name) adds the expression (`*/10 * * * *` -> `x-10-x-x-x-x`)."""
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    expressions = list(dict.fromkeys(expressions))

    def handler_slug(expression: str) -> str:
        name = getattr(SCHEDULED_HANDLERS.get(expression), "__name__", "")
        slug = _slug(name.removeprefix("run_")) if name.isidentifier() else ""
        return slug or "cron"

    slugs = {expression: handler_slug(expression) for expression in expressions}
    names: dict[str, str] = {}
    for expression in expressions:
        slug = slugs[expression]
        if list(slugs.values()).count(slug) > 1:
            slug = f"{slug}-{_slug(expression.replace('*', 'x'))}"
        name, n = f"schedule-{slug}.json", 2
        while name in names.values():  # two expressions with one slug ("1-5" and "1/5")
            name, n = f"schedule-{slug}-{n}.json", n + 1
        names[expression] = name
    return names


def generated_events(
    kinds: Mapping[str, str], crons: Iterable[str], *, records: int = RECORDS
) -> dict[str, dict[str, Any]]:
    """File name -> event: one consumer event per kind (kind -> the ARN of the queue its consumer
    reads) and one schedule event per cron expression."""
    events = {
        consumer_event_name(kind): consumer_event(kind, arn, records=records) for kind, arn in kinds.items()
    }
    for expression, name in schedule_event_names(crons).items():
        events[name] = schedule_event(expression)
    return events


def stage_events(config: StageConfig, *, records: int = RECORDS) -> dict[str, dict[str, Any]]:
    """The generated events of a stage: its kinds' queues under their readable names."""
    kinds = {kind: queue_arn(config.stage, kind) for kind in config.queue_names}
    return generated_events(kinds, (cron.text for cron in config.crons), records=records)


def handwritten_events() -> dict[str, dict[str, Any]]:
    """The committed events of `events/` (not per kind or cron), by file name."""
    return {path.name: json.loads(path.read_text()) for path in sorted(EVENTS_DIR.glob("*.json"))}


def write_events(
    out_dir: Path,
    generated: Mapping[str, dict[str, Any]],
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> list[Path]:
    """Write the hand-written events (each passed through `rewrite`, if given) and the generated
    ones into `out_dir`; a generated event never shadows a hand-written one of the same name."""
    events = handwritten_events()
    if rewrite is not None:
        events = {name: rewrite(event) for name, event in events.items()}
    clash = sorted(set(events) & set(generated))
    if clash:
        raise ValueError(f"generated events would replace the hand-written {clash} in {EVENTS_DIR}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, event in sorted({**events, **generated}.items()):
        path = out_dir / name
        path.write_text(json.dumps(event, indent=2) + "\n")
        written.append(path)
    return written
