"""The generated sample events: one SQS batch per job kind, one schedule input per cron, for any
kind or cron a stage configures (`aijobs events`, `aijobs sam-env`)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aijobs.cron import parse_cron
from aijobs.scheduled import registry
from aijobs_cdk.stage_config import parse_stage_config
from aijobs_cli.local import sample_events
from aijobs_cli.local.sample_events import (
    consumer_event,
    handwritten_events,
    next_firing,
    queue_arn,
    schedule_event,
    schedule_event_names,
    stage_events,
    write_events,
)

# Kinds and a cron of a team's own, next to shipped ones: none of them needs a committed event.
# The cron has no handler registered (yet), whatever a team has registered.
TEAM_CRON = next(text for n in range(60) if (text := f"{n} 3 * * MON-FRI") not in registry.SCHEDULED_HANDLERS)
TEAM_STAGE = {
    "QUEUE_NAMES": "summary;translate;legal-review",
    "CRONS": f"*/10 * * * *;{TEAM_CRON}",
    "PROVIDER": "local",
}


def test_a_stages_own_kinds_and_crons_get_events() -> None:
    events = stage_events(parse_stage_config("t", TEAM_STAGE))
    for kind in ("summary", "translate", "legal-review"):
        records = events[f"sqs-{kind}-batch.json"]["Records"]
        assert {record["eventSourceARN"] for record in records} == {
            f"arn:aws:sqs:us-east-1:123456789012:aijobs-t-{kind}"
        }
        assert [json.loads(record["body"])["kind"] for record in records] == [kind] * len(records)
    crons = {event["cron"] for event in events.values() if "cron" in event}
    assert crons == {"*/10 * * * *", TEAM_CRON}
    assert events["schedule-maintenance.json"]["cron"] == "*/10 * * * *"  # named after its handler
    assert events["schedule-cron.json"]["cron"] == TEAM_CRON  # no handler (yet): no name to take


def test_a_consumer_event_is_a_batch_of_references_the_way_the_mapping_delivers_it() -> None:
    event = consumer_event("translate", queue_arn("dev", "translate"), records=3)
    bodies = [json.loads(record["body"]) for record in event["Records"]]
    assert [set(body) for body in bodies] == [{"jobId", "userId", "kind"}] * 3
    assert len({body["jobId"] for body in bodies}) == 3
    assert all(len(body["jobId"]) == 26 for body in bodies)  # ULID-shaped, like the producer's
    for record in event["Records"]:
        assert record["md5OfBody"] == hashlib.md5(record["body"].encode(), usedforsecurity=False).hexdigest()
        assert (record["eventSource"], record["awsRegion"]) == ("aws:sqs", "us-east-1")
        assert record["attributes"]["SenderId"].endswith(":aijobs-dev-ApiFunction")
    # The same event every time: regenerating changes nothing, and tests can seed its jobs.
    assert consumer_event("translate", queue_arn("dev", "translate"), records=3) == event
    assert consumer_event("summary", queue_arn("dev", "summary"), records=3) != event


@pytest.mark.parametrize(
    ("expression", "fires"),
    [
        ("*/10 * * * *", datetime(2026, 11, 29, 9, 10, tzinfo=UTC)),
        ("* * * * *", datetime(2026, 11, 29, 9, 1, tzinfo=UTC)),
        ("0 3 * * *", datetime(2026, 11, 30, 3, 0, tzinfo=UTC)),
        ("30 8 * * MON-FRI", datetime(2026, 11, 30, 8, 30, tzinfo=UTC)),  # 29 November 2026 is a Sunday
        ("0 0 29 2 *", datetime(2028, 2, 29, 0, 0, tzinfo=UTC)),
    ],
)
def test_a_schedule_event_fires_at_the_expressions_next_minute(expression: str, fires: datetime) -> None:
    assert next_firing(parse_cron(expression)) == fires
    event = schedule_event(expression)
    assert (event["cron"], event["scheduledTime"]) == (expression, fires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", event["executionId"])


def test_schedule_events_are_named_after_their_handlers_and_never_collide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert schedule_event_names(["*/10 * * * *", "*/5 * * * *"]) == {
        "*/10 * * * *": "schedule-maintenance.json",
        "*/5 * * * *": "schedule-sweeper.json",
    }
    # One handler under two expressions, and two expressions without a handler.
    handlers = {**registry.SCHEDULED_HANDLERS, "0 4 * * *": registry.SCHEDULED_HANDLERS["*/10 * * * *"]}
    monkeypatch.setattr(registry, "SCHEDULED_HANDLERS", handlers)
    names = schedule_event_names(["*/10 * * * *", "0 4 * * *", "1-5 * * * *", "1/5 * * * *"])
    assert names["*/10 * * * *"] == "schedule-maintenance-x-10-x-x-x-x.json"
    assert names["0 4 * * *"] == "schedule-maintenance-0-4-x-x-x.json"
    assert len(set(names.values())) == 4, names


def test_written_events_are_the_hand_written_ones_and_the_generated_ones(tmp_path: Path) -> None:
    generated = stage_events(parse_stage_config("t", TEAM_STAGE))
    written = write_events(tmp_path, generated)
    assert {path.name for path in written} == set(handwritten_events()) | set(generated)
    assert (
        json.loads((tmp_path / "sqs-translate-batch.json").read_text())
        == generated["sqs-translate-batch.json"]
    )
    # A generated event never shadows one written by hand.
    clash = {"sqs-dlq-batch.json": consumer_event("dlq", queue_arn("t", "dlq"))}
    with pytest.raises(ValueError, match=r"sqs-dlq-batch\.json"):
        write_events(tmp_path / "again", clash)


def test_the_cli_writes_the_stages_events(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from aijobs_cdk.stage import load_stage_config
    from aijobs_cli.main import app

    result = CliRunner().invoke(app, ["events", "--stage", "dev", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    expected = set(sample_events.handwritten_events()) | set(stage_events(load_stage_config("dev")))
    assert {path.name for path in tmp_path.glob("*.json")} == expected
    missing = CliRunner().invoke(app, ["events", "--stage", "nosuchstage", "--out", str(tmp_path)])
    assert missing.exit_code != 0
    assert ".env.nosuchstage" in missing.output
