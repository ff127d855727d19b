"""Workflows (issue 10): parent jobs split into child jobs, fanned in exactly once, with credits
exact through success, partial failure, cancel and operator re-runs. Every test drives the real
handlers (API, consumers, DLQ consumer, sweeper) on moto."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest

from aijobs import aws, runtime
from aijobs.domain import Job, JobStatus
from aijobs.errors import InvalidInputError
from aijobs.operator import Operator
from aijobs.providers.base import Call as ProviderCall
from aijobs.providers.base import EmbeddingRequest
from aijobs.queues import JobQueues
from aijobs.scheduled.context import CronRun
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.settings import CronSettings
from aijobs.store.keys import child_job_id
from aijobs.workflows import fanin
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage, api_caller, load_event

pytestmark = pytest.mark.integration

KINDS = "summary;embedding;image-generate;report;embedding-batch;image-batch"
PRICES = "summary:2;embedding:1;image-generate:5;report:3;embedding-batch:1;image-batch:0"
PARENT_KINDS = ("report", "embedding-batch", "image-batch")


@pytest.fixture
def stage_values() -> dict[str, str]:
    return {
        "QUEUE_NAMES": KINDS,
        "CRONS": "*/5 * * * *",
        "KIND_PRICES": PRICES,
        "RETRY_BASE_DELAY_SECONDS": "0",
        "THROTTLE_DELAY_SECONDS": "0",
        "PROVIDER_RECHECK_SECONDS": "0",
        "PROVIDER": "local",
    }


Call = Callable[..., tuple[int, Any]]


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Call]:
    yield from api_caller(stage, monkeypatch, credits=10_000)


def run_until_idle(stage: Stage, rounds: int = 60) -> int:
    """Poll every queue like the event-source mappings until no queue delivers anything."""
    mappings = {kind: stage.mapping(kind, batch_size=10) for kind in stage.kinds}
    total = 0
    for _ in range(rounds):
        received = sum(mapping.poll_once().received for mapping in mappings.values())
        total += received
        if received == 0:
            return total
    raise AssertionError("queues never went idle")


def balance(stage: Stage) -> int:
    return stage.store_for("alice").ledger.account("alice").balance


def ledger_holds(stage: Stage) -> None:
    """balance == grants - debits + refunds - expired (the ledger invariant), never negative."""
    ledger = stage.store_for("alice").ledger
    account = ledger.account("alice")
    totals = dict(account.archived)
    for tx in ledger.transactions("alice"):
        if not tx.folded:  # a folded row's amount is in the archived totals already
            totals[tx.type] += tx.amount
    assert account.balance == totals["grant"] - totals["debit"] + totals["refund"] - totals["expire"]
    assert account.balance >= 0


def net_charge(stage: Stage, job_id: str) -> int:
    """What a job cost its owner: its debits minus its refunds."""
    charged = 0
    for tx in stage.store_for("alice").ledger.transactions("alice"):
        if tx.job_id == job_id:
            charged += tx.amount if tx.type == "debit" else -tx.amount if tx.type == "refund" else 0
    return charged


def record_steps(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every text request from now on (the merge's calls carry the parent's id and a step)."""
    seen: list[Any] = []
    real = stage.provider.generate_text

    def generate_text(request: Any) -> Any:
        seen.append(request)
        return real(request)

    monkeypatch.setattr(stage.provider, "generate_text", generate_text)
    return seen


def merges(seen: list[Any], job_id: str) -> list[Any]:
    return [request for request in seen if request.call.job_id == job_id and request.call.step == "merge"]


def submit(api: Call, body: dict[str, Any]) -> str:
    status, answer = api("POST", "/jobs", body)
    assert status == 202, answer
    return str(answer["jobId"])


def parent(stage: Stage, job_id: str) -> Job:
    return stage.job_by_id("alice", job_id)


def children(stage: Stage, job_id: str) -> list[Job]:
    return stage.store_for("alice").list_children("alice", job_id, limit=None).jobs


def queue_depth(stage: Stage, kind: str) -> int:
    attributes = stage.sqs.get_queue_attributes(
        QueueUrl=stage.resources.queue_urls[kind],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def poll(stage: Stage, kind: str, *, max_messages: int = 10) -> int:
    return stage.mapping(kind, batch_size=max_messages).poll_once().received


def sweep(stage: Stage) -> dict[str, Any]:
    ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)
    return run_sweeper(CronRun("*/5 * * * *", "2026-11-29T09:10:00Z"), ctx)


REPORT_TEXT = "\n\n".join(
    f"Paragraph {i} opens here. It says something about topic {i}. It ends with a third sentence."
    for i in range(40)
)


# --- the shipped workflows, end to end ----------------------------------------------------------


def test_report_summarizes_every_chunk_then_the_summaries(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = record_steps(stage, monkeypatch)
    before = balance(stage)
    job_id = submit(api, {"kind": "report", "input": REPORT_TEXT, "options": {"chunkChars": 600}})
    status, view = api("GET", f"/jobs/{job_id}")
    assert view["phase"] == "split"
    assert view["progress"]["total"] == 0
    run_until_idle(stage)

    status, view = api("GET", f"/jobs/{job_id}")
    assert status == 200, view
    assert view["status"] == "succeeded", view
    total = view["progress"]["total"]
    assert total > 3
    assert view["progress"] == {"total": total, "succeeded": total, "failedFinal": 0, "pending": 0}
    result = (
        view["result"]
        or json.loads(
            boto3.client("s3").get_object(Bucket=stage.resources.bucket, Key=view["resultRef"])["Body"].read()
        )["output"]
    )
    assert [part["index"] for part in result["parts"]] == list(range(total))
    assert result["missingParts"] == []
    assert result["summary"]  # the final summary over the chunk summaries
    # Every chunk is a child: on paragraph boundaries, at most chunkChars long, all text covered.
    kids = children(stage, job_id)
    assert [kid.part for kid in kids] == list(range(total))
    assert all(kid.status is JobStatus.SUCCEEDED and kid.parent_id == job_id for kid in kids)
    assert all(isinstance(kid.input, str) and len(kid.input) <= 600 for kid in kids)
    assert " ".join(str(kid.input) for kid in kids).split() == REPORT_TEXT.split()
    assert all(str(kid.input).startswith("Paragraph ") for kid in kids)
    # Each chunk was summarized once. The chunk summaries joined are longer than a chunk, so the
    # merge summarized them in groups no longer than a chunk first, then once over the results.
    assert all(stage.provider.calls[kid.job_id] == 1 for kid in kids)
    parent_calls = [request for request in seen if request.call.job_id == job_id]
    assert len(parent_calls) >= 3
    assert [request.call.step for request in parent_calls][-1] == "merge"
    assert all(request.call.step.startswith("merge-0-") for request in parent_calls[:-1])
    # Every merge call is a summary (the child kind's system text), of at most a chunk.
    assert all("You summarise documents" in (request.system or "") for request in parent_calls)
    assert all(len(request.prompt) <= 600 for request in parent_calls)
    # Credits: report 3 + summary 2 per chunk, exactly.
    assert net_charge(stage, job_id) == 3 + 2 * total
    assert before - balance(stage) == 3 + 2 * total
    ledger_holds(stage)


def test_report_from_an_uploaded_document_with_large_parts(stage: Stage, api: Call) -> None:
    """A multi-page upload: the price is estimated from its size at submit and settled to the true
    chunk count at the split; parts too large for a row are stored in S3 and read by the child, and
    so are the children's results too large for theirs, read back by the merge."""
    pages = "\n\n".join(
        " ".join(f"Page {page} sentence {n} talks about subject {page * 7 + n}." for n in range(120))
        for page in range(12)
    )
    ref = "inputs/alice/long-report.txt"
    boto3.client("s3").put_object(
        Bucket=stage.resources.bucket, Key=ref, Body=pages.encode(), ContentType="text/plain"
    )
    before = balance(stage)
    options = {"chunkChars": 12000, "sentences": 40}
    job_id = submit(api, {"kind": "report", "inputRef": ref, "options": options})
    estimate = -(-len(pages.encode()) // 12000)
    assert before - balance(stage) == 3 + 2 * estimate
    run_until_idle(stage)
    done = parent(stage, job_id)
    assert done.status is JobStatus.SUCCEEDED, done.last_error_message
    total = done.children_total or 0
    kids = children(stage, job_id)
    assert any(kid.input_ref and "/parts/" in kid.input_ref for kid in kids)
    assert all(kid.status is JobStatus.SUCCEEDED for kid in kids)
    assert all(kid.result is None and kid.result_ref for kid in kids)  # over INLINE_RESULT_BYTES
    view = api("GET", f"/jobs/{job_id}")[1]
    result = (
        view["result"]
        or json.loads(
            boto3.client("s3").get_object(Bucket=stage.resources.bucket, Key=view["resultRef"])["Body"].read()
        )["output"]
    )
    assert [part["index"] for part in result["parts"]] == list(range(total))
    assert all(part["summary"] for part in result["parts"])
    assert net_charge(stage, job_id) == 3 + 2 * total
    ledger_holds(stage)


def test_embedding_batch_writes_one_jsonl_object_with_ids_in_order(stage: Stage, api: Call) -> None:
    lines = [
        json.dumps({"id": f"doc-{n}", "text": f"document number {n} about thing {n % 7}"}) for n in range(230)
    ]
    ref = "inputs/alice/docs.jsonl"
    boto3.client("s3").put_object(
        Bucket=stage.resources.bucket,
        Key=ref,
        Body="\n".join(lines).encode(),
        ContentType="application/x-ndjson",
    )
    job_id = submit(
        api, {"kind": "embedding-batch", "inputRef": ref, "options": {"pageSize": 25, "dimensions": 16}}
    )
    run_until_idle(stage)
    done = parent(stage, job_id)
    assert done.status is JobStatus.SUCCEEDED, done.last_error_message
    assert done.children_total == 10  # 230 documents in pages of 25
    output = done.result["output"] if done.result else None
    assert output is not None
    assert output["count"] == 230
    assert output["dimensions"] == 16
    body = boto3.client("s3").get_object(Bucket=stage.resources.bucket, Key=output["object"])["Body"].read()
    rows = [json.loads(line) for line in body.decode().splitlines()]
    assert [row["id"] for row in rows] == [f"doc-{n}" for n in range(230)]
    assert all(len(row["embedding"]) == 16 for row in rows)
    # The vector of a document is the one its text gets on its own (pages keep the order).
    single = stage.provider.embed(
        EmbeddingRequest(
            call=ProviderCall(job_id="x", model="local-embedding-1"),
            texts=("document number 42 about thing 0",),
            dimensions=16,
        )
    )
    assert rows[42]["embedding"] == list(single.vectors[0])
    _, view = api("GET", f"/jobs/{job_id}")
    assert output["object"] in [artifact["key"] for artifact in view["artifacts"]]
    assert net_charge(stage, job_id) == 1 + 1 * 10


def test_image_batch_makes_a_manifest_of_artifacts(stage: Stage, api: Call) -> None:
    prompts = [f"a small red square number {n}" for n in range(6)]
    job_id = submit(
        api, {"kind": "image-batch", "input": {"prompts": prompts}, "options": {"aspectRatio": "1:1"}}
    )
    run_until_idle(stage)
    _, view = api("GET", f"/jobs/{job_id}")
    assert view["status"] == "succeeded"
    images = view["result"]["images"]
    assert [image["index"] for image in images] == list(range(6))
    s3 = boto3.client("s3")
    for image in images:
        (key,) = image["artifacts"]
        assert s3.get_object(Bucket=stage.resources.bucket, Key=key)["Body"].read().startswith(b"\x89PNG")
    assert net_charge(stage, job_id) == 0 + 5 * 6


# --- the parent row, children endpoint ----------------------------------------------------------


def test_progress_and_children_pages(stage: Stage, api: Call) -> None:
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": [f"p {n}" for n in range(5)]}})
    assert poll(stage, "image-batch") == 1  # the split
    _, view = api("GET", f"/jobs/{job_id}")
    assert view["status"] == "running"
    assert view["phase"] == "children"
    assert view["progress"] == {"total": 5, "succeeded": 0, "failedFinal": 0, "pending": 5}
    assert poll(stage, "image-generate", max_messages=2) == 2
    _, view = api("GET", f"/jobs/{job_id}")
    assert view["progress"] == {"total": 5, "succeeded": 2, "failedFinal": 0, "pending": 3}

    seen: list[dict[str, Any]] = []
    path = f"/jobs/{job_id}/children?limit=2"
    while True:
        status, page = api("GET", path)
        assert status == 200, page
        seen.extend(page["jobs"])
        if not page["nextCursor"]:
            break
        path = f"/jobs/{job_id}/children?limit=2&cursor={page['nextCursor']}"
    assert [kid["part"] for kid in seen] == [0, 1, 2, 3, 4]
    assert [kid["jobId"] for kid in seen] == [child_job_id(job_id, n) for n in range(5)]
    assert all(kid["parentId"] == job_id and kid["links"]["parent"] == f"/jobs/{job_id}" for kid in seen)
    assert [kid["status"] for kid in seen[:2]] == ["succeeded", "succeeded"]
    status, one = api("GET", f"/jobs/{child_job_id(job_id, 3)}")
    assert status == 200
    assert one["kind"] == "image-generate"
    assert one["part"] == 3
    # Children stay out of the owner's job list; a plain job has no children.
    _, listing = api("GET", "/jobs")
    assert [job["jobId"] for job in listing["jobs"]] == [job_id]
    plain = submit(api, {"kind": "summary", "input": "Just one job. Nothing more."})
    status, _answer = api("GET", f"/jobs/{plain}/children")
    assert status == 404


def test_children_of_another_tenant_are_not_found(stage: Stage, api: Call) -> None:
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": ["one", "two"]}})
    stage.directory.ensure_user("mallory")
    store = stage.store_for("alice")
    assert store.get("mallory", job_id) is None
    status, _ = api("GET", "/jobs/01AAAAAAAAAAAAAAAAAAAAAAAA/children")
    assert status == 404


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"kind": "report", "input": "text", "options": {"chunkChars": 10}}, 422, "invalid_options"),
        ({"kind": "report", "input": "text", "options": {"maxFailedShare": 2}}, 422, "invalid_options"),
        ({"kind": "image-batch", "input": {"prompts": []}}, 422, "invalid_input"),
        ({"kind": "image-batch", "input": {"prompts": ["ok", 3]}}, 422, "invalid_input"),
        ({"kind": "embedding-batch", "input": {"texts": ["a", " "]}}, 422, "invalid_input"),
    ],
)
def test_workflow_submissions_are_checked_before_anything_is_written(
    stage: Stage, api: Call, body: dict[str, Any], status: int, code: str
) -> None:
    before = balance(stage)
    got, answer = api("POST", "/jobs", body)
    assert got == status, answer
    assert answer["code"] == code
    assert balance(stage) == before
    _, listing = api("GET", "/jobs")
    assert listing["jobs"] == []


def test_too_many_parts_and_unaffordable_workflows_are_refused(stage: Stage, api: Call) -> None:
    runtime.api_service().max_inline_input_bytes = 262_144  # the largest inline input a stage allows
    many = {"kind": "embedding-batch", "input": {"texts": ["a"] * 10_001}, "options": {"pageSize": 1}}
    status, answer = api("POST", "/jobs", many)
    assert (status, answer["code"]) == (422, "too_many_parts"), answer
    assert answer["details"] == {"parts": 10_001, "limit": 10_000}
    # 2,001 images at 5 credits each are more than the 10,000 granted.
    status, answer = api(
        "POST", "/jobs", {"kind": "image-batch", "input": {"prompts": [str(n) for n in range(2001)]}}
    )
    assert (status, answer["code"]) == (402, "insufficient_credits"), answer


def test_an_upload_that_splits_into_too_many_parts_fails_and_is_refunded(stage: Stage, api: Call) -> None:
    ref = "inputs/alice/prompts.txt"
    body = "\n".join(f"p{n}" for n in range(10_001)).encode()
    boto3.client("s3").put_object(Bucket=stage.resources.bucket, Key=ref, Body=body, ContentType="text/plain")
    before = balance(stage)
    job_id = submit(api, {"kind": "image-batch", "inputRef": ref})
    assert balance(stage) < before  # an estimate from the size was reserved
    poll(stage, "image-batch")
    failed = parent(stage, job_id)
    assert (failed.status, failed.last_error_class) == (JobStatus.FAILED_FINAL, "input_too_large")
    assert children(stage, job_id) == []
    assert queue_depth(stage, "image-generate") == 0
    assert balance(stage) == before
    assert net_charge(stage, job_id) == 0
    ledger_holds(stage)


# --- fan-out at scale ---------------------------------------------------------------------------


class CallCounter:
    """AWS calls by operation, counted from botocore's events on the functions' own clients."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        aws.sqs().meta.events.register("before-call.sqs.*", self._count)
        aws.dynamodb().meta.client.meta.events.register("before-call.dynamodb.*", self._count)
        aws.s3().meta.events.register("before-call.s3.*", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.calls[model.name] = self.calls.get(model.name, 0) + 1


def test_a_thousand_children_fan_out_in_batched_writes(stage: Stage, api: Call) -> None:
    runtime.api_service().max_inline_input_bytes = 262_144
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": [f"p{n}" for n in range(1000)]}})
    stage.consumer("image-batch")  # built before counting: cold-start reads are not the split's
    counter = CallCounter()
    assert poll(stage, "image-batch") == 1
    assert parent(stage, job_id).phase == "children"
    # 1,000 rows in transactions of 100, messages ten per SendMessageBatch, a checkpoint per 100.
    assert counter.calls.get("TransactWriteItems", 0) == 10
    assert counter.calls.get("SendMessageBatch", 0) == 100
    assert counter.calls.get("PutItem", 0) == 0
    assert counter.calls.get("SendMessage", 0) == 0
    # The claim, fixing the count, a checkpoint per 100, parking, and the try to move it on.
    assert counter.calls.get("UpdateItem", 0) == 1 + 1 + 10 + 1 + 1
    kids = children(stage, job_id)
    assert [kid.part for kid in kids] == list(range(1000))
    assert queue_depth(stage, "image-generate") == 1000


def test_a_split_that_fails_half_way_resumes_without_duplicates_or_losses(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime.api_service().max_inline_input_bytes = 262_144
    prompts = [f"p{n}" for n in range(350)]
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": prompts}})
    real_send = JobQueues.send_batch
    sent: list[int] = []

    def flaky(self: JobQueues, messages: Any, *, kind: str) -> int:
        sent.append(len(messages))
        if len(sent) == 3:  # the third chunk of 100: its rows are written, its messages are not
            raise ConnectionError("network blip")
        return real_send(self, messages, kind=kind)

    monkeypatch.setattr(JobQueues, "send_batch", flaky)
    poll(stage, "image-batch")
    halfway = parent(stage, job_id)
    assert halfway.status is JobStatus.FAILED_RETRYABLE
    assert halfway.last_error_class == "internal"
    assert halfway.children_split == 200
    assert halfway.children_total == 350
    assert len(children(stage, job_id)) == 300  # rows of the failed chunk exist already

    poll(stage, "image-batch")  # the retry resumes at the checkpoint
    done = parent(stage, job_id)
    assert done.phase == "children"
    assert done.children_split == 350
    kids = children(stage, job_id)
    assert [kid.part for kid in kids] == list(range(350))
    assert [kid.input for kid in kids] == prompts
    # Every child has its message, and none has two (the failed chunk was sent once, on resume).
    bodies: list[str] = []
    while True:
        batch = stage.receive(stage.resources.queue_urls["image-generate"])
        if not batch:
            break
        bodies += [json.loads(message["Body"])["jobId"] for message in batch]
    assert sorted(bodies) == [kid.job_id for kid in kids]


def test_a_long_split_continues_in_a_fresh_invocation(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aijobs.workflows import runner

    monkeypatch.setattr(runner, "SPLIT_SLICE", 100)
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": [f"p{n}" for n in range(250)]}})
    poll(stage, "image-batch")
    first = parent(stage, job_id)
    assert first.status is JobStatus.RUNNING
    assert first.phase == "split"
    assert first.children_split == 100
    assert first.attempts == 1  # a continuation is not an attempt
    poll(stage, "image-batch")
    poll(stage, "image-batch")
    done = parent(stage, job_id)
    assert done.phase == "children"
    assert done.children_split == 250
    assert done.attempts == 1
    assert len(children(stage, job_id)) == 250


# --- exactly once: duplicates, the last two children at once, a lost merge message ------------


def test_duplicate_child_deliveries_count_once_and_merge_once(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = record_steps(stage, monkeypatch)
    job_id = submit(api, {"kind": "report", "input": REPORT_TEXT, "options": {"chunkChars": 1500}})
    poll(stage, "report")
    kids = children(stage, job_id)
    for kid in kids:  # at-least-once delivery: every child message arrives twice
        stage.send(kid)
    run_until_idle(stage)
    done = parent(stage, job_id)
    assert done.status is JobStatus.SUCCEEDED
    assert (done.children_succeeded, done.children_failed, done.children_done) == (len(kids), 0, len(kids))
    assert all(stage.provider.calls[kid.job_id] == 1 for kid in kids)
    assert len(merges(seen, job_id)) == 1  # the final summary
    # A late duplicate of the merge message, and of a child, change nothing.
    stage.send(done)
    stage.send(kids[0])
    run_until_idle(stage)
    again = parent(stage, job_id)
    assert again.children_done == len(kids)
    assert again.updated_at == done.updated_at
    assert len(merges(seen, job_id)) == 1
    assert net_charge(stage, job_id) == 3 + 2 * len(kids)


def test_the_last_two_children_finishing_together_merge_once(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both final transitions commit before either child looks at its parent: both see every child
    done, and the conditional step lets exactly one of them queue the merge."""
    job_id = submit(api, {"kind": "report", "input": REPORT_TEXT, "options": {"chunkChars": 1500}})
    poll(stage, "report")
    kids = children(stage, job_id)
    store = stage.store_for("alice")
    *first, one, two = kids
    # Run all but the last two through the consumer, then finish those two by hand, interleaved.
    stage.sqs.purge_queue(QueueUrl=stage.resources.queue_urls["summary"])
    for kid in first:
        stage.send(kid)
    run_until_idle(stage)
    assert parent(stage, job_id).children_done == len(first)
    now = stage.clock()
    lease = timedelta(minutes=1)
    claimed = [store.claim(kid, now=now, lease=lease, max_attempts=4) for kid in (one, two)]
    finished = [
        store.succeed(
            kid,
            now=now,
            result={"output": {"summary": "s"}},
            result_ref=None,
            model=None,
            usage={},
            cost=None,
        )
        for kid in claimed
        if kid is not None
    ]
    assert len(finished) == 2
    assert parent(stage, job_id).children_done == len(kids)
    queues = JobQueues(stage.sqs, stage.resources.queue_urls)
    winners = [fanin.try_merge(store, queues, kid.user_id, job_id, now) for kid in finished]
    assert sorted(winners) == [False, True]
    assert queue_depth(stage, "report") == 1
    seen = record_steps(stage, monkeypatch)
    run_until_idle(stage)
    assert parent(stage, job_id).status is JobStatus.SUCCEEDED
    assert len(merges(seen, job_id)) == 1


def test_a_lost_merge_message_is_recovered_by_the_sweeper(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aijobs.consumer import attempts

    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": ["one", "two", "three"]}})
    # Every child's consumer dies right after its final transaction (before looking at the parent).
    monkeypatch.setattr(attempts, "job_ended", lambda *args: False)
    run_until_idle(stage)
    stuck = parent(stage, job_id)
    assert stuck.status is JobStatus.RUNNING
    assert stuck.phase == "children"
    assert stuck.children_done == 3
    assert sweep(stage)["actions"] == {}  # within its hold the parent is left alone
    stage.clock.advance(stage.resources.config.stuck_queued_seconds + 1)
    assert sweep(stage)["actions"] == {"image-batch:recheck_resent": 1}
    run_until_idle(stage)
    done = parent(stage, job_id)
    assert done.status is JobStatus.SUCCEEDED
    assert len(done.result["output"]["images"]) == 3


# --- failure policy, dead letters, cancel ---------------------------------------------------------


def test_by_default_one_failed_child_fails_the_parent_and_charges_only_what_succeeded(
    stage: Stage, api: Call
) -> None:
    before = balance(stage)
    prompts = ["a tree", "#fail:400 a broken prompt", "a house", "a cloud", "a boat"]
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": prompts}})
    run_until_idle(stage)
    failed = parent(stage, job_id)
    assert (failed.status, failed.last_error_class) == (JobStatus.FAILED_FINAL, "children_failed")
    assert failed.children_failed >= 1
    succeeded = failed.children_succeeded
    assert net_charge(stage, job_id) == 5 * succeeded
    assert before - balance(stage) == 5 * succeeded
    ledger_holds(stage)


def test_a_tolerant_policy_merges_what_succeeded_and_names_the_missing_parts(stage: Stage, api: Call) -> None:
    prompts = ["a tree", "#fail:400 broken", "a house", "a cloud", "a boat"]
    job_id = submit(
        api, {"kind": "image-batch", "input": {"prompts": prompts}, "options": {"maxFailedShare": 0.2}}
    )
    run_until_idle(stage)
    _, view = api("GET", f"/jobs/{job_id}")
    assert view["status"] == "succeeded", view
    assert view["result"]["missingParts"] == [1]
    assert [image["index"] for image in view["result"]["images"]] == [0, 2, 3, 4]
    assert view["progress"] == {"total": 5, "succeeded": 4, "failedFinal": 1, "pending": 0}
    assert net_charge(stage, job_id) == 5 * 4
    # Past the share (two of five fail with 20% allowed) the parent fails.
    prompts[3] = "#fail:400 broken too"
    other = submit(
        api, {"kind": "image-batch", "input": {"prompts": prompts}, "options": {"maxFailedShare": 0.2}}
    )
    run_until_idle(stage)
    assert parent(stage, other).last_error_class == "children_failed"
    assert net_charge(stage, other) == 5 * parent(stage, other).children_succeeded
    ledger_holds(stage)


def test_a_dead_lettered_child_counts_as_failed_and_the_dlq_list_names_its_parent(
    stage: Stage, api: Call
) -> None:
    from aijobs.store.dead_letter_records import list_dead_letters

    job_id = submit(
        api,
        {
            "kind": "image-batch",
            "input": {"prompts": ["fine", "#fail:503 down"]},
            "options": {"maxFailedShare": 0.5},
        },
    )
    run_until_idle(stage)
    dead = stage.job_by_id("alice", child_job_id(job_id, 1))
    assert dead.status is JobStatus.FAILED_RETRYABLE
    assert dead.attempts == 4
    assert stage.dlq_mapping("image-generate").poll_once().received == 1
    (entry,) = list_dead_letters(
        boto3.resource("dynamodb").Table(stage.resources.meta_table), "image-generate"
    )
    assert entry.parent_id == job_id
    assert entry.job_id == dead.job_id
    run_until_idle(stage)  # the DLQ consumer queued the merge: half may fail, so it succeeds
    done = parent(stage, job_id)
    assert done.status is JobStatus.SUCCEEDED
    assert done.result["output"]["missingParts"] == [1]
    assert net_charge(stage, job_id) == 5


def test_cancel_half_way_never_runs_the_rest_and_charges_every_child_that_succeeded(
    stage: Stage, api: Call
) -> None:
    """Issue 24 point 2: the tenant cancels while a child is mid-call. That child finishes and is
    charged; the children not started never run; the parent ends cancelled once no child runs."""
    before = balance(stage)
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": [f"picture {n}" for n in range(8)]}})
    poll(stage, "image-batch")
    assert poll(stage, "image-generate", max_messages=3) == 3
    answers: list[tuple[int, Any]] = []
    stage.provider.before_run = lambda _request: answers.append(api("POST", f"/jobs/{job_id}/cancel"))
    assert poll(stage, "image-generate", max_messages=1) == 1  # the cancel comes during this call

    ((status, view),) = answers
    assert status == 202, view
    assert (view["status"], view["phase"]) == ("running", "children")
    assert view["cancelRequestedAt"] is not None
    status, again = api("POST", f"/jobs/{job_id}/cancel")  # idempotent while it settles
    assert (status, again["cancelRequestedAt"]) == (202, view["cancelRequestedAt"])

    calls_before = dict(stage.provider.calls)
    run_until_idle(stage)
    kids = {kid.part: kid for kid in children(stage, job_id)}
    assert kids[3].status is JobStatus.SUCCEEDED  # it was running: it finished
    for index in range(4, 8):  # never run, finalized as cancelled on arrival
        assert (kids[index].status, kids[index].last_error_class) == (JobStatus.FAILED_FINAL, "cancelled")
        assert kids[index].job_id not in calls_before
        assert kids[index].job_id not in stage.provider.calls
    done = parent(stage, job_id)
    assert (done.status, done.last_error_class) == (JobStatus.FAILED_FINAL, "cancelled")
    assert done.result is None
    assert job_id not in stage.provider.calls
    # Every image made is charged (5 credits each), nothing else: no free in-flight child.
    assert net_charge(stage, job_id) == 5 * 4
    assert before - balance(stage) == 5 * 4
    ledger_holds(stage)
    status, final = api("POST", f"/jobs/{job_id}/cancel")
    assert (status, final["status"], final["lastErrorClass"]) == (200, "failed_final", "cancelled")
    # A job that finished otherwise cannot be cancelled.
    plain = submit(api, {"kind": "summary", "input": "One sentence. Another one."})
    run_until_idle(stage)
    status, answer = api("POST", f"/jobs/{plain}/cancel")
    assert (status, answer["code"]) == (409, "job_finished")


def test_cancel_during_the_split_makes_no_more_children_and_refunds_the_parts_never_made(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aijobs.workflows import runner

    monkeypatch.setattr(runner, "SPLIT_SLICE", 100)
    before = balance(stage)
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": [f"p{n}" for n in range(250)]}})
    poll(stage, "image-batch")  # the first 100 children are written; the split continues later
    assert parent(stage, job_id).children_split == 100
    status, view = api("POST", f"/jobs/{job_id}/cancel")
    assert (status, view["phase"]) == (202, "split")
    run_until_idle(stage)
    done = parent(stage, job_id)
    assert (done.status, done.last_error_class) == (JobStatus.FAILED_FINAL, "cancelled")
    assert (done.children_total, done.children_split) == (100, 100)
    assert len(children(stage, job_id)) == 100
    # No child ran (none had started), so nothing is charged.
    assert not any(kid.job_id in stage.provider.calls for kid in children(stage, job_id))
    assert balance(stage) == before
    ledger_holds(stage)


def test_a_child_running_when_the_policy_fails_its_parent_is_charged(stage: Stage, api: Call) -> None:
    """More children failed than allowed: the parent fails, but not before the child running
    then has finished (else it would finish after the parent settled, free)."""
    job_id = submit(
        api,
        {"kind": "image-batch", "input": {"prompts": ["fine one", "#fail:400 refused", "fine two"]}},
    )
    poll(stage, "image-batch")
    merged_meanwhile: list[int] = []

    def meanwhile(_request: Any) -> None:
        # While part 0 is mid-call: part 1 fails for good, then the parent's queue is served.
        assert poll(stage, "image-generate", max_messages=1) == 1
        failing = parent(stage, job_id)
        assert failing.children_failed > failing.failures_allowed
        merged_meanwhile.append(poll(stage, "image-batch"))

    stage.provider.before_run = meanwhile
    assert poll(stage, "image-generate", max_messages=1) == 1
    assert merged_meanwhile == [0]  # no merge step while a child still ran
    run_until_idle(stage)
    done = parent(stage, job_id)
    assert (done.status, done.last_error_class) == (JobStatus.FAILED_FINAL, "children_failed")
    kids = {kid.part: kid for kid in children(stage, job_id)}
    assert kids[0].status is JobStatus.SUCCEEDED
    assert (kids[2].status, kids[2].last_error_class) == (JobStatus.FAILED_FINAL, "cancelled")  # stopped
    assert kids[2].job_id not in stage.provider.calls
    assert net_charge(stage, job_id) == 5  # the one image made
    ledger_holds(stage)


def test_cancel_a_plain_queued_job_refunds_it_and_it_never_runs(stage: Stage, api: Call) -> None:
    before = balance(stage)
    job_id = submit(api, {"kind": "summary", "input": "One sentence. Another one."})
    assert balance(stage) == before - 2
    status, view = api("POST", f"/jobs/{job_id}/cancel")
    assert status == 200
    assert view["lastErrorClass"] == "cancelled"
    run_until_idle(stage)
    assert job_id not in stage.provider.calls
    assert balance(stage) == before
    status, _ = api("POST", "/jobs/01AAAAAAAAAAAAAAAAAAAAAAAA/cancel")
    assert status == 404


# --- operator re-run ------------------------------------------------------------------------------


def refuse_flaky_prompt(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """The image model refuses "a flaky prompt" for good until the switch returned is turned off
    (`switch["on"] = False`: the fix an operator re-runs after)."""
    switch = {"on": True}
    real = stage.provider.generate_image

    def provider(request: Any) -> Any:
        if switch["on"] and request.prompt == "a flaky prompt":
            raise InvalidInputError("the model refused this prompt today")
        return real(request)

    monkeypatch.setattr(stage.provider, "generate_image", provider)
    return switch


def test_operator_rerun_of_a_parent_reruns_only_its_failed_children_and_merges_again(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = refuse_flaky_prompt(stage, monkeypatch)
    job_id = submit(
        api, {"kind": "image-batch", "input": {"prompts": ["one", "a flaky prompt", "three", "four"]}}
    )
    run_until_idle(stage)
    assert parent(stage, job_id).last_error_class == "children_failed"
    charged = net_charge(stage, job_id)

    broken["on"] = False  # the fix
    operator = Operator(
        directory=stage.directory, queues=JobQueues(stage.sqs, stage.resources.queue_urls), clock=stage.clock
    )
    calls = dict(stage.provider.calls)
    # The failed child, and the siblings it stopped before they started (the parent was failing).
    not_succeeded = [kid.job_id for kid in children(stage, job_id) if kid.status is not JobStatus.SUCCEEDED]
    assert child_job_id(job_id, 1) in not_succeeded
    assert child_job_id(job_id, 0) not in not_succeeded
    reopened = operator.rerun("alice", job_id)
    assert reopened.status is JobStatus.RUNNING
    assert reopened.phase == "children"
    run_until_idle(stage)
    done = parent(stage, job_id)
    assert done.status is JobStatus.SUCCEEDED, done.last_error_message
    assert (done.children_succeeded, done.children_failed) == (4, 0)
    rerun = [key for key in stage.provider.calls if stage.provider.calls[key] != calls.get(key)]
    assert sorted(rerun) == sorted(not_succeeded)  # only the children that had not succeeded ran again
    assert len(done.result["output"]["images"]) == 4
    assert done.result["output"]["missingParts"] == []
    assert net_charge(stage, job_id) == charged  # an operator re-run is not charged again
    ledger_holds(stage)
    # A child alone is re-run only while its parent still waits; else re-run the parent.
    from aijobs.errors import TransitionConflict

    with pytest.raises(TransitionConflict, match="re-run the parent"):
        stage.store_for("alice").requeue_child(
            stage.job_by_id("alice", child_job_id(job_id, 0)).model_copy(
                update={"status": JobStatus.FAILED_FINAL}
            ),
            now=stage.clock(),
            parent_must_wait=True,
        )


def test_a_batch_rerun_passes_over_children_of_a_finished_parent_and_counts_what_it_runs(
    stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child's re-run is refused once its parent ended: the dry run must not count it. The
    parent's batch re-run takes it, on the house (the parent settled what its children made)."""
    broken = refuse_flaky_prompt(stage, monkeypatch)
    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": ["one", "a flaky prompt", "three"]}})
    run_until_idle(stage)
    assert parent(stage, job_id).last_error_class == "children_failed"
    charged = net_charge(stage, job_id)
    operator = Operator(
        directory=stage.directory, queues=JobQueues(stage.sqs, stage.resources.queue_urls), clock=stage.clock
    )
    operator.sleep = lambda _seconds: None

    dry = operator.rerun_batch("image-generate")
    # The failed child, and the sibling its failure stopped before it started (ended `cancelled`).
    assert dry.matched == 0
    assert dry.left_alone == {"parent_not_waiting": 1, "cancelled": 1}
    done = operator.rerun_batch("image-generate", dry_run=False)
    assert (done.matched, done.rerun, done.skipped) == (0, [], [])

    broken["on"] = False  # the fix
    assert operator.rerun_batch("image-batch").matched == 1
    done = operator.rerun_batch("image-batch", dry_run=False)
    assert (done.rerun, done.waived) == ([job_id], [job_id])
    run_until_idle(stage)
    assert parent(stage, job_id).status is JobStatus.SUCCEEDED
    assert parent(stage, job_id).charge_waived
    assert net_charge(stage, job_id) == charged  # on the house, as the row says
    ledger_holds(stage)


def test_a_post_without_a_body_needs_no_content_type(stage: Stage, api: Call) -> None:
    """Found by the API fuzzer: a cancel sent with no body and no Content-Type was a 415."""
    job_id = submit(api, {"kind": "summary", "input": "One sentence. Another one."})
    event = load_event("api-post-jobs.json")
    key = stage.directory.create_api_key("alice")
    event["headers"] = {"authorization": f"Bearer {key}"}
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/jobs/{job_id}/cancel"
    event.pop("body", None)
    from api import handler

    response = handler.handler(event, LambdaContext("api"))
    assert response["statusCode"] == 200, response["body"]
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/jobs"
    response = handler.handler(event, LambdaContext("api"))  # a route that needs a body: 422
    assert response["statusCode"] == 422, response["body"]


def test_cursors_must_continue_the_query_they_came_from(stage: Stage, api: Call) -> None:
    """A crafted cursor was a 500 (found by the CLI work): now any cursor that is not a key of the
    same query, in the caller's own rows, is a 400."""
    import base64

    job_id = submit(api, {"kind": "image-batch", "input": {"prompts": [f"p {n}" for n in range(3)]}})
    poll(stage, "image-batch")
    _, page = api("GET", f"/jobs/{job_id}/children?limit=1")
    children_cursor = page["nextCursor"]
    assert children_cursor

    def encode(key: dict[str, str]) -> str:
        return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")

    for path in (
        f"/jobs?cursor={encode({'pk': 'USER#alice'})}",  # no sort key
        f"/jobs?cursor={children_cursor}",  # a children cursor on the job list
        f"/jobs?status=queued&cursor={encode({'pk': 'USER#alice', 'sk': 'JOB#x'})}",  # not the index's key
        f"/jobs/{job_id}/children?cursor={encode({'pk': 'USER#alice', 'sk': 'JOB#x'})}",  # another prefix
        f"/jobs/{job_id}/children?cursor={encode({'pk': 'USER#mallory', 'sk': 'CHILD#x'})}",  # another user
    ):
        status, answer = api("GET", path)
        assert (status, answer["code"]) == (400, "invalid_cursor"), path
    status, page = api("GET", f"/jobs/{job_id}/children?limit=1&cursor={children_cursor}")
    assert status == 200
    assert [kid["part"] for kid in page["jobs"]] == [1]


def test_the_accepted_answer_links_a_workflow_and_its_merge_is_an_attempt(stage: Stage, api: Call) -> None:
    status, accepted = api("POST", "/jobs", {"kind": "image-batch", "input": {"prompts": ["a", "b"]}})
    assert status == 202
    job_id = accepted["jobId"]
    assert accepted["links"]["children"] == f"/jobs/{job_id}/children"
    assert accepted["links"]["cancel"] == f"/jobs/{job_id}/cancel"
    run_until_idle(stage)
    _, view = api("GET", f"/jobs/{job_id}")
    assert view["status"] == "succeeded"
    assert view["attempts"] == 1  # the merge's own first attempt
    assert view["links"]["cancel"] is None
