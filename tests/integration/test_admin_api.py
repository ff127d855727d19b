"""The operator routes (`/admin/...`) and the console's files, through the API's Lambda handler."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from aijobs import runtime
from aijobs.api.admin import key_id
from aijobs.domain import Job, JobStatus
from aijobs.store.attempt_log import ATTEMPT_LOG_SIZE
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage, load_event

pytestmark = pytest.mark.integration

LEASE = timedelta(minutes=5)
# Fails on every attempt until an operator re-runs the job (the local provider's `#outage`).
OUTAGE = "#outage A sentence to summarise. Another one follows it."


@dataclass
class FakeControl:
    """The consumers' mappings: pause/resume flips them here."""

    enabled: dict[str, bool] = field(default_factory=dict)

    def set_mapping_enabled(self, mapping_id: str, *, enabled: bool) -> None:
        self.enabled[mapping_id] = enabled

    def mapping_enabled(self, mapping_id: str) -> bool | None:
        return self.enabled.get(mapping_id, True)


class Admin:
    def __init__(self, stage: Stage, handler: Any) -> None:
        self.stage = stage
        self._handler = handler
        self.keys = {
            "ops": stage.directory.create_api_key("ops", role="operator"),
            "legacy": stage.directory.create_api_key("legacy-ops", role="admin"),
            "alice": stage.directory.create_api_key("alice"),
        }

    def call(
        self, method: str, path: str, *, key: str | None = "ops", query: dict[str, str] | None = None,
        body: Any = None, timeout_seconds: float = 60.0,
    ) -> tuple[int, dict[str, str], Any]:  # fmt: skip
        event = copy.deepcopy(load_event("api-get-job.json"))
        event["headers"] = {"content-type": "application/json"}
        if key is not None:
            event["headers"]["authorization"] = f"Bearer {self.keys[key]}"
        event["requestContext"]["http"]["method"] = method
        event["rawPath"] = event["requestContext"]["http"]["path"] = path
        event["queryStringParameters"] = query
        event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in (query or {}).items())
        event["pathParameters"] = None
        event["body"] = json.dumps(body) if body is not None else None
        response = self._handler(event, LambdaContext("aijobs-dev-api", timeout_seconds=timeout_seconds))
        text = response.get("body") or "null"
        is_json = response.get("headers", {}).get("Content-Type", "").startswith("application/json")
        return response["statusCode"], response.get("headers", {}), json.loads(text) if is_json else text


@pytest.fixture
def admin(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Admin]:
    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    runtime.api_service().clock = stage.clock
    service = runtime.admin_service()
    service.clock = service.operator.clock = stage.clock
    service.operator.sleep = lambda _seconds: None
    service.control = FakeControl()
    from api import handler

    yield Admin(stage, handler.handler)
    runtime.reset_runtime()


def _attempt(stage: Stage, job: Job, seconds: float, *, fail: str | None = None) -> Job:
    """One claimed attempt of `seconds`, ending in a retryable failure `fail` or a success."""
    store = stage.store_for(job.user_id)
    claimed = store.claim(job, now=stage.clock(), lease=LEASE, max_attempts=50)
    assert claimed is not None
    stage.clock.advance(seconds)
    if fail is None:
        return store.succeed(
            claimed,
            now=stage.clock(),
            result={"output": "ok"},
            result_ref=None,
            model=None,
            usage={},
            cost=None,
        )
    store.fail_retryable(claimed, now=stage.clock(), error_class=fail, message=f"{fail} <b>boom</b>")
    return stage.job(job)


def _dead_letter(stage: Stage, user: str, text: str = "#fail:503") -> Job:
    """A job whose attempts failed and whose message then reached the DLQ (recorded, finalized):
    only a spent attempt budget makes a dead letter finalize its job."""
    job = _attempt(stage, stage.submit(user, "summary", text), 2, fail="provider_unavailable")
    stage.set_attempts(job, stage.resources.config.queue_tuning("summary").max_attempts)
    stage.sqs.send_message(
        QueueUrl=stage.resources.dlq_urls["summary"],
        MessageBody=json.dumps({"jobId": job.job_id, "userId": user, "kind": "summary"}),
    )
    assert sum(o.received for o in [stage.dlq_mapping().poll_once()]) == 1
    return stage.job(job)


def _admin_operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (method.upper(), path)
        for path, operations in document["paths"].items()
        if path.startswith("/admin/")
        for method in operations
    ]


def test_every_admin_route_is_documented_and_refuses_a_user_key(admin: Admin) -> None:
    status, _h, document = admin.call("GET", "/openapi.json", key=None)
    assert status == 200
    operations = _admin_operations(document)
    assert len(operations) == 11
    # The stage's kinds are an enum wherever a kind is named (so a fuzzer reaches the logic).
    kinds = document["components"]["schemas"]["JobRequest"]["properties"]["kind"]["enum"]
    assert document["components"]["schemas"]["BatchRerunRequest"]["properties"]["kind"]["enum"] == kinds
    for path in ("/admin/kinds/{kind}/pause", "/admin/jobs", "/admin/dead-letters"):
        (operation,) = document["paths"][path].values()
        (named,) = [p for p in operation["parameters"] if p["name"] == "kind"]
        assert named["schema"]["enum"] == kinds, path
    for method, path in operations:
        concrete = path.replace("{user_id}", "alice").replace("{job_id}", "01J0000000000000000000000A")
        concrete = concrete.replace("{kind}", "summary")
        payload = {"reason": "x"} if path.endswith("fail-final") else {"kind": "summary"}
        status, _h, body = admin.call(method, concrete, key="alice", body=payload)
        assert (status, body["code"]) == (403, "forbidden"), (method, path)
        assert 403 in {int(code) for code in document["paths"][path][method.lower()]["responses"]}
        status, _h, _body = admin.call(method, concrete, key=None, body=payload)
        assert status == 401


def test_a_schema_error_is_answered_before_the_key_is_checked(admin: Admin) -> None:
    """docs/operations/console.md, order of refusals: powertools validates a request before any middleware,
    so a malformed body is a 422 whatever the key; the same route with a valid body is a 403/401."""
    path = "/admin/jobs/alice/01J0000000000000000000000A/fail-final"
    for key in ("alice", None):
        status, _h, body = admin.call("POST", path, key=key, body={"reason": ""})
        assert (status, body["code"]) == (422, "validation_error"), key
    assert admin.call("POST", path, key="alice", body={"reason": "x"})[0] == 403
    assert admin.call("POST", "/admin/reruns", key="ops", body={"kind": "summary", "limit": 0})[0] == 422


def test_an_old_admin_key_is_an_operator_key(admin: Admin) -> None:
    status, _h, body = admin.call("GET", "/admin/dead-letters", key="legacy")
    assert status == 200, body


def test_attempt_timeline_keeps_each_attempt_and_is_bounded(admin: Admin) -> None:
    stage = admin.stage
    job = stage.submit("alice", "summary", "<script>alert(1)</script>")
    job = _attempt(stage, job, 1.5, fail="provider_throttled")
    job = _attempt(stage, job, 0.25)

    status, _h, body = admin.call("GET", f"/admin/jobs/alice/{job.job_id}")

    assert status == 200, body
    assert body["input"] == "<script>alert(1)</script>"
    assert [
        (a["attempt"], a["outcome"], a["durationMs"], a.get("errorClass")) for a in body["attemptLog"]
    ] == [
        (1, "failed_retryable", 1500, "provider_throttled"),
        (2, "succeeded", 250, None),
    ]
    # A long life keeps only the last ATTEMPT_LOG_SIZE entries.
    store = stage.store_for("alice")
    looping = stage.submit("alice", "summary", "again")
    for _ in range(ATTEMPT_LOG_SIZE + 3):
        looping = _attempt(stage, looping, 1, fail="provider_unavailable")
    log = stage.job(looping).attempt_log
    assert len(log) == ATTEMPT_LOG_SIZE
    assert log[-1]["n"] == ATTEMPT_LOG_SIZE + 3
    assert log[0]["n"] == 4
    assert store.get("alice", looping.job_id) is not None


def test_jobs_across_tenants_filter_and_page(admin: Admin) -> None:
    stage = admin.stage
    alice = [
        _attempt(stage, stage.submit("alice", "summary", f"a{i}"), 1, fail="bad_input") for i in range(3)
    ]
    stage.clock.advance(60)
    bob = _attempt(stage, stage.submit("bob", "summary", "b"), 1, fail="provider_throttled")

    status, _h, body = admin.call("GET", "/admin/jobs", query={"status": "failed_retryable"})
    assert status == 200, body
    assert [j["jobId"] for j in body["jobs"]] == [bob.job_id, *[j.job_id for j in reversed(alice)]]

    _s, _h, only_bob = admin.call("GET", "/admin/jobs", query={"errorClass": "provider_throttled"})
    assert [j["userId"] for j in only_bob["jobs"]] == ["bob"]
    _s, _h, only_alice = admin.call("GET", "/admin/jobs", query={"tenant": "alice", "kind": "summary"})
    assert {j["userId"] for j in only_alice["jobs"]} == {"alice"}
    assert len(only_alice["jobs"]) == 3

    seen: list[str] = []
    query = {"status": "failed_retryable", "limit": "1"}
    while True:
        _s, _h, page = admin.call("GET", "/admin/jobs", query=query)
        seen += [j["jobId"] for j in page["jobs"]]
        if not page["nextCursor"]:
            break
        query["cursor"] = page["nextCursor"]
    assert seen == [bob.job_id, *[j.job_id for j in reversed(alice)]]

    status, _h, refused = admin.call("GET", "/admin/jobs", query={"cursor": "eyJwayI6IlVTRVIjYm9iIn0"})
    assert (status, refused["code"]) == (400, "invalid_cursor")


def test_a_batch_rerun_answers_before_its_function_times_out(admin: Admin) -> None:
    """With less time left than a re-run needs, the page re-runs nothing and names every job it
    did not reach (a page cut off by the timeout would answer nothing at all); asked again with
    time, it takes them."""
    from aijobs.operator import RERUN_MARGIN_SECONDS

    jobs = [_dead_letter(admin.stage, user) for user in ("alice", "bob")]
    dead = {job.job_id for job in jobs}
    body = {"kind": "summary", "dryRun": False}
    status, _h, short = admin.call(
        "POST", "/admin/reruns", body=body, timeout_seconds=RERUN_MARGIN_SECONDS - 1
    )
    assert status == 200, short
    assert (short["matched"], short["rerun"], set(short["notReached"])) == (2, [], dead)
    assert all(admin.stage.job(job).status is JobStatus.FAILED_FINAL for job in jobs)
    _s, _h, again = admin.call("POST", "/admin/reruns", body=body)
    assert (set(again["rerun"]), again["notReached"]) == (dead, [])


def test_dead_letter_rerun_and_fail_final(admin: Admin) -> None:
    stage = admin.stage
    dead = _dead_letter(stage, "alice")
    other = _dead_letter(stage, "bob")
    assert dead.status is JobStatus.FAILED_FINAL
    assert dead.dead_lettered

    _s, _h, listed = admin.call("GET", "/admin/dead-letters", query={"kind": "summary"})
    assert {d["jobId"] for d in listed["deadLetters"]} == {dead.job_id, other.job_id}

    _s, _h, dry = admin.call("POST", "/admin/reruns", body={"kind": "summary"})
    assert (dry["matched"], dry["dryRun"], dry["rerun"]) == (2, True, [])

    status, _h, rerun = admin.call("POST", f"/admin/jobs/alice/{dead.job_id}/rerun")
    assert status == 200, rerun
    assert rerun["status"] == "queued"
    assert rerun["reruns"] == 1
    messages = stage.receive(stage.resources.queue_urls["summary"])
    assert dead.job_id in {json.loads(m["Body"])["jobId"] for m in messages}
    status, _h, again = admin.call("POST", f"/admin/jobs/alice/{dead.job_id}/rerun")
    assert (status, again["code"]) == (409, "not_rerunnable")

    status, _h, given_up = admin.call(
        "POST", f"/admin/jobs/alice/{dead.job_id}/fail-final", body={"reason": "bad input"}
    )
    assert status == 200
    assert given_up["status"] == "failed_final"
    assert given_up["attemptLog"][-1]["errorClass"] == "operator"
    status, _h, _twice = admin.call(
        "POST", f"/admin/jobs/alice/{dead.job_id}/fail-final", body={"reason": "x"}
    )
    assert status == 409

    status, _h, missing = admin.call("GET", f"/admin/jobs/alice/{other.job_id}")
    assert status == 404, missing  # bob's job under alice's name is not found


def test_overview_pause_resume_credits_and_spend(admin: Admin) -> None:
    stage = admin.stage
    stage.submit("alice", "summary", "waiting")
    stage.clock.advance(90)
    _attempt(stage, stage.submit("bob", "summary", "done"), 1)

    status, _h, overview = admin.call("GET", "/admin/overview")
    assert status == 200, overview
    summary = next(k for k in overview["kinds"] if k["kind"] == "summary")
    assert summary["backlog"] == 2
    assert summary["paused"] is False
    assert summary["oldestQueuedAgeSeconds"] == 91
    assert summary["succeededLastHour"] == 1
    assert sum(h["succeeded"] for h in summary["hours"]) == 1

    status, _h, paused = admin.call("POST", "/admin/kinds/summary/pause")
    assert status == 200
    assert paused["paused"] is True
    _s, _h, overview = admin.call("GET", "/admin/overview")
    assert next(k for k in overview["kinds"] if k["kind"] == "summary")["paused"] is True
    _s, _h, resumed = admin.call("POST", "/admin/kinds/summary/resume")
    assert resumed["paused"] is False
    status, _h, unknown = admin.call("POST", "/admin/kinds/nope/pause")
    assert (status, unknown["code"]) == (422, "unknown_kind")

    stage.store_for("alice").ledger.grant("alice", 40, stage.clock() + timedelta(days=3))
    status, _h, credits = admin.call("GET", "/admin/tenants/alice/credits")
    assert status == 200
    assert credits["balance"] == 40
    status, _h, _nobody = admin.call("GET", "/admin/tenants/nobody/credits")
    assert status == 404

    status, _h, spend = admin.call("GET", "/admin/spend")
    assert status == 200
    assert spend["counted"] is False
    assert spend["usd"] == "0"


def test_operator_calls_are_rate_limited_and_logged_by_key_id(
    admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = runtime.admin_service().limiter
    moments = iter([0.0] * 40 + [0.5])
    limiter.monotonic = lambda: next(moments)
    for _ in range(int(limiter.burst)):
        assert admin.call("GET", "/admin/dead-letters")[0] == 200
    status, headers, body = admin.call("GET", "/admin/dead-letters")
    assert (status, body["code"]) == (429, "rate_limited")
    assert int(headers["Retry-After"]) >= 1
    # Another operator's key has its own bucket.
    assert admin.call("GET", "/admin/dead-letters", key="legacy")[0] == 200
    calls = [r for r in caplog.records if r.getMessage() == "operator call"]
    assert {getattr(r, "keyId", None) for r in calls} == {
        key_id(f"Bearer {admin.keys[k]}") for k in ("ops", "legacy")
    }
    assert all(admin.keys["ops"] not in str(r.__dict__) for r in caplog.records)


def test_console_is_served_with_a_strict_policy(admin: Admin) -> None:
    status, headers, page = admin.call("GET", "/console", key=None)
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert '<script src="/console/console.js"' in page
    assert "<script>" not in page
    status, headers, script = admin.call("GET", "/console/console.js", key=None)
    assert status == 200
    assert headers["Content-Type"].startswith("text/javascript")
    assert "innerHTML" not in script
    assert "sessionStorage" in script
    assert admin.call("GET", "/console/secrets.txt", key=None)[0] == 404
    assert admin.call("GET", "/console/..%2Fapp.py", key=None)[0] == 404


def test_time_filters_at_the_ends_of_the_calendar_are_clamped_not_a_500(admin: Admin) -> None:
    """`0001-01-01T00:00+05:00` is a valid time with no UTC equivalent (found by `make fuzz`)."""
    job = admin.stage.submit("alice", "summary", "old and new")
    window = {"since": "0001-01-01T00:00:00+05:00", "until": "9999-12-31T23:59:59-05:00"}
    status, _h, body = admin.call("GET", "/admin/jobs", query=window)
    assert status == 200, body
    assert [listed["jobId"] for listed in body["jobs"]] == [job.job_id]
    status, _h, body = admin.call("POST", "/admin/reruns", body={"kind": "summary", **window})
    assert (status, body["matched"]) == (200, 0), body


def test_a_time_filter_must_be_iso_text(admin: Admin) -> None:
    """Pydantic alone would read `0.5` as a Unix timestamp; the documented format is date-time."""
    status, _h, body = admin.call("GET", "/admin/jobs", query={"since": "0.5"})
    assert (status, body["code"]) == (422, "validation_error"), body
    status, _h, body = admin.call("POST", "/admin/reruns", body={"kind": "summary", "until": 1})
    assert (status, body["code"]) == (422, "validation_error"), body
    assert admin.call("GET", "/admin/jobs", query={"since": "2026-01-31T09:00:00Z"})[0] == 200


# --- batch re-runs: what they select and what they cost (issue 24, point 3) ---------------------


def _submit_paid(admin: Admin, text: str) -> str:
    """A job of alice's through the API: its price (1 credit) is reserved with its row."""
    status, _h, created = admin.call("POST", "/jobs", key="alice", body={"kind": "summary", "input": text})
    assert status == 202, created
    return str(created["jobId"])


def _balance(stage: Stage) -> int:
    return stage.store_for("alice").ledger.account("alice").balance


def test_a_batch_rerun_leaves_cancelled_and_operator_failed_jobs_alone_unless_named(admin: Admin) -> None:
    stage = admin.stage
    stage.store_for("alice").ledger.grant("alice", 10, stage.clock() + timedelta(days=3))
    dead = [_dead_letter(stage, "alice"), _dead_letter(stage, "bob")]
    cancelled = _submit_paid(admin, "cancelled by its owner")
    assert admin.call("POST", f"/jobs/{cancelled}/cancel", key="alice")[0] == 200
    given_up = stage.submit("bob", "summary", "spam")
    body = {"reason": "spam"}
    assert admin.call("POST", f"/admin/jobs/bob/{given_up.job_id}/fail-final", body=body)[0] == 200

    _s, _h, dry = admin.call("POST", "/admin/reruns", body={"kind": "summary"})
    assert (dry["matched"], dry["leftAlone"]) == (2, {"cancelled": 1, "operator": 1}), dry
    status, _h, done = admin.call("POST", "/admin/reruns", body={"kind": "summary", "dryRun": False})
    assert status == 200, done
    assert len(done["rerun"]) == done["matched"] == dry["matched"]
    assert sorted(done["rerun"]) == sorted(job.job_id for job in dead)
    assert stage.job_by_id("alice", cancelled).status is JobStatus.FAILED_FINAL
    assert stage.job(given_up).status is JobStatus.FAILED_FINAL

    # Named, they are re-run, and the count still says what runs.
    named_jobs = (("alice", cancelled, "cancelled"), ("bob", given_up.job_id, "operator"))
    for user, job_id, error_class in named_jobs:
        request = {"kind": "summary", "errorClass": error_class}
        _s, _h, named = admin.call("POST", "/admin/reruns", body=request)
        assert (named["matched"], named["leftAlone"]) == (1, {}), named
        _s, _h, named = admin.call("POST", "/admin/reruns", body=request | {"dryRun": False})
        assert named["rerun"] == [job_id]
        _s, _h, row = admin.call("GET", f"/admin/jobs/{user}/{job_id}")
        assert row["status"] == "queued"
        # The error that ended it is the previous run's, not the current one's.
        assert (row["lastErrorClass"], row["previousErrorClass"]) == (None, error_class)
    # Alice's cancelled job was refunded: its re-run is on the house, and the answer says so.
    assert named["waived"] == []  # bob's job was free (submitted without a price)
    _s, _h, row = admin.call("GET", f"/admin/jobs/alice/{cancelled}")
    assert (row["chargeState"], row["chargeWaived"]) == ("refunded", True)


def test_a_rerun_after_a_refund_is_on_the_house_and_recorded_so(admin: Admin) -> None:
    stage = admin.stage
    stage.store_for("alice").ledger.grant("alice", 10, stage.clock() + timedelta(days=3))
    job_id = _submit_paid(admin, "#outage the provider is down until an operator re-runs this")
    list(stage.drain("summary"))
    assert stage.dlq_mapping().poll_once().received == 1
    assert _balance(stage) == 10  # refunded when it was dead-lettered

    status, _h, queued = admin.call("POST", f"/admin/jobs/alice/{job_id}/rerun")
    assert status == 200, queued
    assert (queued["chargeState"], queued["chargeWaived"]) == ("refunded", True)
    assert (queued["lastErrorClass"], queued["previousErrorClass"]) == (None, "transient")
    _s, _h, view = admin.call("GET", f"/jobs/{job_id}", key="alice")
    assert view["lastErrorClass"] is None  # the owner's view does not show the old error as current
    list(stage.drain("summary"))
    _s, _h, done = admin.call("GET", f"/admin/jobs/alice/{job_id}")
    assert (done["status"], done["chargeWaived"]) == ("succeeded", True)
    assert done["previousErrorClass"] == "transient"
    assert _balance(stage) == 10  # never charged again
    kinds = [(tx.type, tx.amount) for tx in stage.store_for("alice").ledger.transactions("alice")]
    assert sorted(kind for kind in kinds if kind[0] != "grant") == [("debit", 1), ("refund", 1)]

    # A job stranded between attempts still holds its reservation: its re-run is paid as usual.
    stranded = _attempt(stage, stage.job_by_id("alice", _submit_paid(admin, "stranded")), 1, fail="transient")
    _s, _h, queued = admin.call("POST", f"/admin/jobs/alice/{stranded.job_id}/rerun")
    assert (queued["chargeState"], queued["chargeWaived"]) == ("reserved", False)
    list(stage.drain("summary"))
    assert stage.job(stranded).charge_state == "settled"
    assert _balance(stage) == 9


# --- dead letters show what became of them (issue 24, point 7) ---------------------------------------


def _letters(admin: Admin, **query: str) -> dict[str, dict[str, Any]]:
    status, _h, body = admin.call("GET", "/admin/dead-letters", query=query or None)
    assert status == 200, body
    return {letter["jobId"]: letter for letter in body["deadLetters"]}


def _dead_letter_count(admin: Admin) -> int:
    _s, _h, overview = admin.call("GET", "/admin/overview")
    return int(next(k for k in overview["kinds"] if k["kind"] == "summary")["deadLetters"])


def test_dead_letters_show_what_became_of_them_and_the_count_shows_the_open_ones(admin: Admin) -> None:
    stage = admin.stage
    fixed, given_up, cancelled, untouched = (
        _dead_letter(stage, user, OUTAGE) for user in ("alice", "bob", "alice", "carol")
    )
    assert _dead_letter_count(admin) == 4
    listed = _letters(admin)
    assert {(j, d["jobStatus"], d["resolution"], d["resolved"]) for j, d in listed.items()} == {
        (job.job_id, "failed_final", "open", False) for job in (fixed, given_up, cancelled, untouched)
    }

    # Re-run, in flight: still open (an operator has not seen it end), with its status now.
    assert admin.call("POST", f"/admin/jobs/alice/{fixed.job_id}/rerun")[0] == 200
    letter = _letters(admin)[fixed.job_id]
    assert (letter["jobStatus"], letter["resolution"], letter["reruns"]) == ("queued", "rerunning", 1)
    assert letter["lastErrorClass"] == "provider_unavailable"  # what killed it, as recorded
    assert _dead_letter_count(admin) == 4
    list(stage.drain("summary"))  # the outage is over: it succeeds
    assert fixed.job_id not in _letters(admin)
    assert _dead_letter_count(admin) == 3

    # Re-run, then given up by an operator; re-run, then cancelled by its owner.
    for job in (given_up, cancelled):
        assert admin.call("POST", f"/admin/jobs/{job.user_id}/{job.job_id}/rerun")[0] == 200
    junk = {"reason": "junk"}
    assert admin.call("POST", f"/admin/jobs/bob/{given_up.job_id}/fail-final", body=junk)[0] == 200
    assert admin.call("POST", f"/jobs/{cancelled.job_id}/cancel", key="alice")[0] == 200
    assert _dead_letter_count(admin) == 1
    assert list(_letters(admin)) == [untouched.job_id]

    every = _letters(admin, all="true")
    assert {j: (d["jobStatus"], d["resolution"], d["resolved"]) for j, d in every.items()} == {
        fixed.job_id: ("succeeded", "succeeded", True),
        given_up.job_id: ("failed_final", "failed_by_operator", True),
        cancelled.job_id: ("failed_final", "cancelled", True),
        untouched.job_id: ("failed_final", "open", False),
    }
    assert every[cancelled.job_id]["jobErrorClass"] == "cancelled"


def test_a_dead_letter_that_dies_again_is_open_again_and_a_late_copy_does_not_reopen_it(
    admin: Admin,
) -> None:
    """At-least-once: the DLQ consumer's new record of a second death reopens the entry; a late
    copy of the first letter, after the job succeeded, changes nothing."""
    stage = admin.stage
    job = stage.submit("alice", "summary", "#fail:503 A sentence to summarise. Another one.")
    list(stage.drain("summary"))  # every attempt fails: dead-lettered
    assert stage.dlq_mapping().poll_once().received == 1
    recorded = _letters(admin)[job.job_id]["deadLetteredAt"]

    assert admin.call("POST", f"/admin/jobs/alice/{job.job_id}/rerun")[0] == 200
    stage.clock.advance(60)
    list(stage.drain("summary"))  # a re-run is a fresh budget, not a fix: it dies again
    assert _letters(admin)[job.job_id]["resolution"] == "rerunning"  # failed_retryable, not recorded yet
    assert stage.dlq_mapping().poll_once().received == 1
    again = _letters(admin)[job.job_id]
    assert (again["resolution"], again["reruns"]) == ("open", 1)
    assert again["deadLetteredAt"] > recorded
    assert _dead_letter_count(admin) == 1

    stage.store_for("alice")._table.update_item(  # the input is fixed, and it is re-run again
        Key={"pk": "USER#alice", "sk": f"JOB#{job.job_id}"},
        UpdateExpression="SET input_json = :i",
        ExpressionAttributeValues={":i": json.dumps("A sentence to summarise. Another one.")},
    )
    assert admin.call("POST", f"/admin/jobs/alice/{job.job_id}/rerun")[0] == 200
    list(stage.drain("summary"))
    assert stage.job(job).status is JobStatus.SUCCEEDED
    assert _dead_letter_count(admin) == 0
    late = {"jobId": job.job_id, "userId": "alice", "kind": "summary"}  # the first letter, again
    stage.sqs.send_message(QueueUrl=stage.resources.dlq_urls["summary"], MessageBody=json.dumps(late))
    assert stage.dlq_mapping().poll_once().received == 1
    assert _dead_letter_count(admin) == 0
    assert _letters(admin, all="true")[job.job_id]["resolution"] == "succeeded"


def test_the_job_detail_shows_what_it_was_charged_used_and_cost(admin: Admin) -> None:
    stage = admin.stage
    job = stage.submit("alice", "summary", "#cost:0.0125 One sentence to summarise. And another one.")
    list(stage.drain("summary"))
    status, _h, body = admin.call("GET", f"/admin/jobs/alice/{job.job_id}")
    assert status == 200, body
    row = stage.job(job)
    assert (body["status"], body["costUsd"], body["model"]) == ("succeeded", 0.0125, row.model)
    assert body["usage"] == row.usage
    assert body["usage"]["input_tokens"] > 0
    assert body["price"] == row.price
    assert body["cancelRequestedAt"] is None
