"""How the CLI shows a job: a workflow parent's phase and progress, a child's parent and part."""

from __future__ import annotations

from typing import Any

from aijobs.workflows.report import chunk_text
from aijobs_cli.commands.demo import REPORT_CHUNK_CHARS, sample_report
from aijobs_cli.commands.jobs import job_fields, job_line, workflow_note

PARENT = "01M8MTKH5537ZRM1P4SGCFN1A8"


def _view(**fields: Any) -> dict[str, Any]:
    return {"jobId": PARENT, "kind": "report", "status": "running", "attempts": 1, **fields}


def test_a_parent_shows_its_phase_and_progress() -> None:
    job = _view(phase="children", progress={"total": 11, "succeeded": 6, "failedFinal": 1, "pending": 4})
    assert workflow_note(job) == "phase children, 7/11 parts done: 6 succeeded, 1 failed, 4 pending"
    assert (
        job_line(job)
        == f"{PARENT}  running  (phase children, 7/11 parts done: 6 succeeded, 1 failed, 4 pending)"
    )
    fields = dict(job_fields(job))
    assert fields["phase"] == "children"
    assert fields["progress"] == "11 parts: 6 succeeded, 1 failed, 4 pending"
    assert fields["children"] == f"aijobs children {PARENT}"
    assert "parent" not in fields


def test_a_parent_before_its_split_has_no_parts_yet() -> None:
    job = _view(
        status="queued", phase="split", progress={"total": 0, "succeeded": 0, "failedFinal": 0, "pending": 0}
    )
    assert workflow_note(job) == "phase split: not split into parts yet"


def test_a_child_shows_its_parent_and_part() -> None:
    job = _view(jobId=f"{PARENT}.00003", kind="summary", parentId=PARENT, part=3, phase=None, progress=None)
    assert workflow_note(job) == f"part 3 of {PARENT}"
    assert job_line(job) == f"{PARENT}.00003  running  (part 3 of {PARENT})"
    fields = dict(job_fields(job))
    assert (fields["parent"], fields["part"]) == (PARENT, "3")
    assert "phase" not in fields


def test_a_plain_job_has_no_workflow_note() -> None:
    job = _view(kind="summary", status="failed_final", lastErrorClass="transient", lastErrorMessage="503")
    assert workflow_note(job) == ""
    assert job_line(job) == f"{PARENT}  failed_final"
    assert dict(job_fields(job))["error"] == "transient: 503"


def test_the_sample_report_ships_with_the_cli_and_makes_many_chunks() -> None:
    text = sample_report().decode("ascii")
    assert len(text.split()) > 3000
    assert len(chunk_text(text, REPORT_CHUNK_CHARS)) >= 10


def test_status_shows_what_the_job_was_charged_used_and_cost() -> None:
    job = _view(
        kind="summary", status="succeeded", phase=None, progress=None, model="us.amazon.nova-pro-v1:0",
        price=2, charge="settled", usage={"inputTokens": 1200, "outputTokens": 80}, costUsd=0.0012,
        cancelRequestedAt="2026-12-01T10:00:00Z",
    )  # fmt: skip
    fields = dict(job_fields(job))
    assert fields["model"] == "us.amazon.nova-pro-v1:0"
    assert fields["credits"] == "2 (settled)"
    assert fields["usage"] == "inputTokens 1,200, outputTokens 80"
    assert fields["cost"] == "$0.001200"
    assert fields["cancel requested"] == "2026-12-01T10:00:00Z"
    free = dict(job_fields(_view(kind="summary", phase=None, progress=None)))
    assert "cost" not in free
    assert "credits" not in free
