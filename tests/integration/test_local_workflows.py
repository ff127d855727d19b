"""Workflows on the local stack, over HTTP and through the CLI: a `report` of an uploaded multi-page
document followed to the end (`GET /jobs/{id}`, paged `/children`), and `aijobs demo`, `status`,
`children`, `cancel` and `dlq list` against the same stack."""

from __future__ import annotations

import itertools
import json
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from aijobs.workflows.report import chunk_text
from aijobs_cli.commands.demo import REPORT_CHUNK_CHARS, sample_report
from aijobs_cli.local.stack import LocalStack
from aijobs_cli.main import app
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack, wait_until

pytestmark = pytest.mark.integration

TERMINAL = ("succeeded", "failed_final")
SAMPLE = sample_report()
SAMPLE_CHUNKS = len(chunk_text(SAMPLE.decode(), REPORT_CHUNK_CHARS))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_local_stack(tmp_path_factory.mktemp("workflows")) as local:
        yield local


@pytest.fixture(scope="module")
def client(stack: LocalStack) -> Target:
    assert stack.info_file is not None
    return Target.from_info_file(stack.info_file)


def _cli(stack: LocalStack, *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--info-file", str(stack.info_file)])


def _upload(client: Target, data: bytes, name: str = "handbook.txt") -> str:
    """The presigned-form upload `POST /uploads` hands out; returns the `inputRef`."""
    response = client.request(
        "POST", "/uploads", {"contentType": "text/plain", "size": len(data), "name": name}
    )
    assert response.status == 201, response.body
    client.upload(response.body, data, name)
    return str(response.body["inputRef"])


def _submit(client: Target, body: dict[str, Any]) -> str:
    response = client.request("POST", "/jobs", body)
    assert response.status == 202, response.body
    return str(response.body["jobId"])


def _get(client: Target, job_id: str) -> Any:
    response = client.request("GET", f"/jobs/{job_id}")
    assert response.status == 200, response.body
    return response.body


def _wait(client: Target, job_id: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    job = _get(client, job_id)
    while job["status"] not in TERMINAL:
        assert time.monotonic() < deadline, f"job {job_id} did not finish: {job}"
        time.sleep(0.2)
        job = _get(client, job_id)
    return job


def _all_children(client: Target, job_id: str, *, page_size: int, status: str | None = None) -> list[Any]:
    """Every child through `GET /jobs/{id}/children`, following `nextCursor` page by page."""
    children: list[Any] = []
    cursor: str | None = None
    for _ in range(1000):
        query = f"limit={page_size}" + (f"&status={status}" if status else "")
        if cursor:
            # The gateway URL-decodes the query like API Gateway: the cursor is sent encoded.
            query += "&cursor=" + urllib.parse.quote(cursor, safe="")
        response = client.request("GET", f"/jobs/{job_id}/children?{query}")
        assert response.status == 200, response.body
        page = response.body["jobs"]
        assert len(page) <= page_size
        children.extend(page)
        cursor = response.body.get("nextCursor")
        if not cursor:
            return children
    raise AssertionError("the children's pages never ended")


@dataclass(frozen=True)
class ReportRun:
    job_id: str
    final: dict[str, Any]
    # (total, succeeded, failedFinal, pending) of `progress`, every poll from submit to the end.
    seen: list[tuple[int, int, int, int]]
    seconds: float


@pytest.fixture(scope="module")
def outage_report(client: Target) -> str:
    """A report whose first part never gets through (`#outage`): its child is dead-lettered after
    four attempts, which run while the tests before the one that checks them do."""
    text = "#outage A part that never gets through. " + "\n\n".join(
        f"Paragraph {n} is fine. It has a second sentence." for n in range(20)
    )
    return _submit(client, {"kind": "report", "input": text, "options": {"chunkChars": 500}})


@pytest.fixture(scope="module")
def report_run(client: Target, outage_report: str) -> ReportRun:
    """The sample handbook uploaded, submitted as a `report` by `inputRef`, polled to the end
    (after `outage_report` is submitted, so that the two overlap)."""
    started = time.monotonic()
    ref = _upload(client, SAMPLE)
    job_id = _submit(
        client, {"kind": "report", "inputRef": ref, "options": {"chunkChars": REPORT_CHUNK_CHARS}}
    )
    seen: list[tuple[int, int, int, int]] = []
    deadline = time.monotonic() + 120  # fails only on a real hang
    while True:
        job = _get(client, job_id)
        progress = job["progress"]
        seen.append((progress["total"], progress["succeeded"], progress["failedFinal"], progress["pending"]))
        if job["status"] in TERMINAL:
            return ReportRun(job_id, job, seen, time.monotonic() - started)
        assert time.monotonic() < deadline, f"the report did not finish: {job}"
        time.sleep(0.1)


def _result(stack: LocalStack, view: dict[str, Any]) -> Any:
    if view["result"] is not None:
        return view["result"]
    body = boto3.client("s3").get_object(Bucket=stack.info()["bucket"], Key=view["resultRef"])["Body"]
    return json.loads(body.read())["output"]


# --- a report over HTTP ----------------------------------------------------------------------------


def test_the_sample_is_a_multi_page_document_of_many_chunks() -> None:
    text = SAMPLE.decode()
    assert len(text.split()) > 3000  # about seven pages
    assert SAMPLE_CHUNKS >= 10
    assert "#" not in text  # no local-provider directive can hide in it


def test_a_report_by_input_ref_succeeds_with_every_part_summarized(
    stack: LocalStack, client: Target, report_run: ReportRun
) -> None:
    job = report_run.final
    assert job["status"] == "succeeded", job
    assert (job["kind"], job["deadLettered"]) == ("report", False)
    total = job["progress"]["total"]
    assert total == SAMPLE_CHUNKS
    assert job["progress"] == {"total": total, "succeeded": total, "failedFinal": 0, "pending": 0}
    assert job["links"]["children"] == f"/jobs/{report_run.job_id}/children"

    result = _result(stack, job)
    assert [part["index"] for part in result["parts"]] == list(range(total))
    assert all(isinstance(part["summary"], str) and part["summary"].strip() for part in result["parts"])
    assert isinstance(result["summary"], str)
    assert result["summary"].strip()  # the final summary over the chunk summaries
    assert (result["missingParts"], result["total"]) == ([], total)


def test_the_progress_never_goes_down_and_ends_at_the_total(report_run: ReportRun) -> None:
    seen = report_run.seen
    total = report_run.final["progress"]["total"]
    for before, after in itertools.pairwise(seen):
        # total, succeeded and failedFinal only grow; pending only shrinks once the total is known.
        assert after[0] >= before[0], seen
        assert after[1] >= before[1], seen
        assert after[2] >= before[2], seen
        assert after[1] + after[2] >= before[1] + before[2], seen
        if before[0]:
            assert after[3] <= before[3], seen
    assert all(t in (0, total) for t, *_ in seen), seen  # the total is fixed once, at the split
    assert seen[-1] == (total, total, 0, 0)
    assert len(set(seen)) > 1, seen  # polled while the job ran, not only after it finished


def test_the_children_listed_page_by_page_are_the_parts(client: Target, report_run: ReportRun) -> None:
    job_id, total = report_run.job_id, report_run.final["progress"]["total"]
    children = _all_children(client, job_id, page_size=4)
    assert len(children) == total
    assert [child["part"] for child in children] == list(range(total))
    assert [child["jobId"] for child in children] == [f"{job_id}.{index:05d}" for index in range(total)]
    assert {(child["kind"], child["status"], child["parentId"]) for child in children} == {
        ("summary", "succeeded", job_id)
    }
    assert all(child["links"]["parent"] == f"/jobs/{job_id}" for child in children)
    assert len(_all_children(client, job_id, page_size=5, status="succeeded")) == total
    assert _all_children(client, job_id, page_size=100, status="failed_final") == []


# --- the CLI ---------------------------------------------------------------------------------------


def test_cli_status_shows_a_parents_progress_and_a_childs_parent(
    stack: LocalStack, report_run: ReportRun
) -> None:
    job_id, total = report_run.job_id, report_run.final["progress"]["total"]
    parent = _cli(stack, "status", job_id)
    assert parent.exit_code == 0, parent.output
    assert "phase" in parent.stdout
    assert f"{total} parts: {total} succeeded, 0 failed, 0 pending" in parent.stdout
    child = _cli(stack, "status", f"{job_id}.00002")
    assert child.exit_code == 0, child.output
    assert job_id in child.stdout
    assert "part" in child.stdout
    as_json = _cli(stack, "status", f"{job_id}.00002", "--json")
    assert (json.loads(as_json.stdout)["parentId"], json.loads(as_json.stdout)["part"]) == (job_id, 2)


def test_cli_children_pages_and_follows_cursors(stack: LocalStack, report_run: ReportRun) -> None:
    job_id, total = report_run.job_id, report_run.final["progress"]["total"]
    first = _cli(stack, "children", job_id, "--limit", "3", "--json")
    assert first.exit_code == 0, first.output
    page = json.loads(first.stdout)
    assert [child["part"] for child in page["jobs"]] == [0, 1, 2]
    assert page["nextCursor"]
    rest = _cli(stack, "children", job_id, "--limit", "4", "--cursor", page["nextCursor"], "--all", "--json")
    assert rest.exit_code == 0, rest.output
    assert [child["part"] for child in json.loads(rest.stdout)["jobs"]] == list(range(3, total))
    everything = _cli(stack, "children", job_id, "--limit", "5", "--all", "--status", "succeeded", "--json")
    assert everything.exit_code == 0, everything.output
    assert len(json.loads(everything.stdout)["jobs"]) == total
    assert json.loads(everything.stdout)["nextCursor"] is None
    table = _cli(stack, "children", job_id, "--limit", "2")
    assert table.exit_code == 0, table.output
    assert f"aijobs children {job_id} --cursor" in table.stdout


def test_cli_cancel_a_running_report(stack: LocalStack, client: Target) -> None:
    """Cancelled once it has split, while its parts wait (their consumer is paused, so the report
    can neither be caught still queued nor finish first, however fast or slow the machine): the
    cancel is recorded on the running report, its parts never run, and it ends cancelled."""
    assert stack.resources is not None
    text = "\n\n".join(f"Paragraph {n} about cancelling. It has a second sentence." for n in range(30))
    stack.control.set_kind(stack.resources, "summary", enabled=False)
    try:
        job_id = _submit(client, {"kind": "report", "input": text, "options": {"chunkChars": 500}})
        wait_until(lambda: _get(client, job_id)["progress"]["total"] > 0, "the report to split")
        cancelled = _cli(stack, "cancel", job_id, "--json")
        assert cancelled.exit_code == 0, cancelled.output
        view = json.loads(cancelled.stdout)
        assert (view["status"], view["lastErrorClass"]) == ("running", None), view
        assert view["cancelRequestedAt"], view
    finally:
        stack.control.set_kind(stack.resources, "summary", enabled=True)
    job = _wait(client, job_id)
    assert (job["status"], job["lastErrorClass"]) == ("failed_final", "cancelled"), job
    assert job["progress"]["succeeded"] == 0, job  # no part ran
    again = _cli(stack, "cancel", job_id)  # a cancelled job answers a cancel again
    assert again.exit_code == 0, again.output
    assert f"{job_id}  failed_final" in again.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["cancel", "01NOSUCHJOB"], 2, "not_found"),
        (["cancel", " "], 1, "JOB_ID is empty"),
        (["children", "01NOSUCHJOB"], 2, "404"),
        (["children", "{report}", "--status", "done"], 1, "not a job status"),
        (["children", "{report}", "--limit", "0"], 2, "--limit"),
        (["children", "{report}", "--cursor", ""], 1, "--cursor is empty"),
        (["children", "{report}", "--cursor", "not-a-cursor"], 2, "400"),
        (["children", "{report}.00000"], 2, "not a workflow job"),
        (["cancel", "{report}"], 2, "409"),
        (["status", "{report}.99999"], 2, "404"),
        (["demo", "--no-report", "--report-file", "x.txt"], 1, "--report-file needs the report"),
        (["demo", "--chunk-chars", "10"], 2, "--chunk-chars"),
    ],
)
def test_cli_bad_input_exits_non_zero_with_a_message(
    stack: LocalStack, report_run: ReportRun, args: list[str], code: int, message: str
) -> None:
    result = _cli(stack, *[arg.replace("{report}", report_run.job_id) for arg in args])
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())  # the console wraps long lines


def test_cli_dlq_list_names_a_dead_lettered_childs_parent(
    stack: LocalStack, client: Target, outage_report: str
) -> None:
    job_id = outage_report
    job = _wait(client, job_id)
    assert (job["status"], job["lastErrorClass"]) == ("failed_final", "children_failed"), job
    child_id = f"{job_id}.00000"
    entries: dict[str, Any] = {}

    def listed() -> bool:
        shown = _cli(stack, "dlq", "list", "--kind", "summary", "--json")
        assert shown.exit_code == 0, shown.output
        entries.update({entry["job_id"]: entry for entry in json.loads(shown.stdout)})
        return child_id in entries

    wait_until(listed, "the child's dead letter")
    assert entries[child_id]["parent_id"] == job_id
    assert _get(client, child_id)["deadLettered"] is True


# --- the demo --------------------------------------------------------------------------------------


# Far beyond any run, however busy the machine: the demo must end when its jobs have, not wait it out.
DEMO_TIMEOUT = 600


def test_demo_summarizes_the_sample_report_next_to_the_mix(stack: LocalStack) -> None:
    started = time.monotonic()
    result = _cli(stack, "demo", "--json", "--timeout", str(DEMO_TIMEOUT))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    report = data["report"]
    assert report["outcome"] == "succeeded", report
    assert report["parts"] == report["total"] == SAMPLE_CHUNKS
    assert report["partsFinished"] == SAMPLE_CHUNKS
    assert report["missingParts"] == []
    assert report["chunkChars"] == REPORT_CHUNK_CHARS
    assert report["summary"]
    assert report["jobId"]
    assert "unfinished" not in data["outcomes"], data["outcomes"]
    assert time.monotonic() - started < DEMO_TIMEOUT
