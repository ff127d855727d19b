"""GET /jobs/{id}?wait=N: answers as soon as the job is finished, or when N runs out, reading the
row at backed-off intervals (never a busy loop). A fake clock makes the waits instant."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from aijobs import runtime
from aijobs.api.service import LONG_POLL_BACKOFF, LONG_POLL_MAX_SECONDS
from aijobs.domain import JobStatus
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage
from tests.integration.test_api import Api

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. A consumer does the slow part."


class FakeTime:
    """The service's monotonic clock and sleep: sleeping advances the clock and may run a hook."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []
        self.on_sleep: Any = None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Api, FakeTime]]:
    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    service = runtime.api_service()
    service.clock = stage.clock
    fake = FakeTime()
    service.sleep, service.monotonic = fake.sleep, fake.monotonic
    from api import handler

    yield Api(stage, handler.handler), fake
    runtime.reset_runtime()


def _get(api: Api, job_id: str, wait: str) -> tuple[int, Any]:
    status, _, body = api.call("api-get-job.json", path=f"/jobs/{job_id}", query={"wait": wait})
    return status, body


def test_it_answers_as_soon_as_the_job_is_finished(api: tuple[Api, FakeTime], stage: Stage) -> None:
    client, fake = api
    job_id = client.submit(input=TEXT)["jobId"]
    fake.on_sleep = lambda count: list(stage.drain("summary")) if count == 3 else None
    status, body = _get(client, job_id, "20")
    assert (status, body["status"]) == (200, "succeeded")
    assert fake.sleeps == list(LONG_POLL_BACKOFF[:3])  # the read after the third pause saw it


def test_it_returns_the_job_as_it_is_when_the_wait_runs_out(api: tuple[Api, FakeTime]) -> None:
    client, fake = api
    job_id = client.submit(input=TEXT)["jobId"]
    status, body = _get(client, job_id, "5")
    assert (status, body["status"]) == (200, JobStatus.QUEUED.value)
    assert sum(fake.sleeps) == pytest.approx(5)
    # Backed off, then the longest pause repeats: a handful of reads, not a busy loop.
    assert fake.sleeps[:4] == list(LONG_POLL_BACKOFF)
    assert len(fake.sleeps) <= 6


def test_a_finished_job_is_answered_without_waiting(api: tuple[Api, FakeTime], stage: Stage) -> None:
    client, fake = api
    job_id = client.submit(input=TEXT)["jobId"]
    list(stage.drain("summary"))
    assert _get(client, job_id, "20")[1]["status"] == "succeeded"
    assert fake.sleeps == []


def test_the_wait_ends_before_the_function_would_time_out(
    api: tuple[Api, FakeTime], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, fake = api
    job_id = client.submit(input=TEXT)["jobId"]
    monkeypatch.setattr(LambdaContext, "get_remaining_time_in_millis", lambda _self: 6_000)
    _get(client, job_id, "20")
    assert sum(fake.sleeps) == pytest.approx(4)  # 6 s left, less the 2 s margin


@pytest.mark.parametrize("wait", ["-1", str(LONG_POLL_MAX_SECONDS + 1), "soon"])
def test_a_wait_out_of_range_is_refused_with_a_reason(api: tuple[Api, FakeTime], wait: str) -> None:
    client, fake = api
    job_id = client.submit(input=TEXT)["jobId"]
    status, body = _get(client, job_id, wait)
    assert (status, body["code"]) == (422, "validation_error")
    assert any("wait" in detail["path"] for detail in body["details"])
    assert fake.sleeps == []


def test_another_tenants_job_is_not_found_without_waiting(api: tuple[Api, FakeTime]) -> None:
    client, fake = api
    job_id = client.submit(input=TEXT)["jobId"]
    status, _, _ = client.call("api-get-job.json", user="bob", path=f"/jobs/{job_id}", query={"wait": "20"})
    assert status == 404
    assert fake.sleeps == []


# --- the CLI's --wait -------------------------------------------------------------------------------


class _ScriptedTarget:
    """A Target whose GET /jobs/{id} answers from a script, recording each path it was asked."""

    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses
        self.paths: list[str] = []

    def request(self, method: str, path: str, body: Any = None, headers: Any = None) -> Any:
        from aijobs_cli.target import ApiResponse

        self.paths.append(path)
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return ApiResponse(200, {"jobId": "j1", "status": status})


def test_the_cli_waits_with_long_polls_not_a_tight_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from aijobs_cli.commands import jobs

    target = _ScriptedTarget(["queued", "running", "succeeded"])
    job = jobs._wait(target, "j1", timeout=120)  # type: ignore[arg-type]
    assert job["status"] == "succeeded"
    assert target.paths == ["/jobs/j1?wait=20"] * 3


def test_the_cli_asks_for_no_longer_than_its_own_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from aijobs_cli.commands import jobs

    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the CLI reads time.monotonic
    target = _ScriptedTarget(["running"])
    original = target.request

    def slow(method: str, path: str, body: Any = None, headers: Any = None) -> Any:
        clock[0] += float(path.rsplit("=", 1)[-1]) if "wait=" in path else 0
        return original(method, path, body, headers)

    monkeypatch.setattr(target, "request", slow)
    job = jobs._wait(target, "j1", timeout=27)  # type: ignore[arg-type]
    assert job["status"] == "running"  # not finished: the job as it was when the timeout ran out
    assert target.paths == ["/jobs/j1?wait=20", "/jobs/j1?wait=7"]
