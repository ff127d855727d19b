"""Log keys stay with their thread: the local stack runs every function as threads of one process."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from aijobs.observability import log_context, log_lambda_context, logger
from aijobs_cli.local.esm import LambdaContext


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The JSON lines the shared powertools logger writes, at INFO whatever a CLI test set."""
    stream = io.StringIO()
    handler: Any = logger.registered_handler
    previous, level = handler.setStream(stream), logger.log_level
    logger.setLevel("INFO")
    yield stream
    handler.setStream(previous)
    logger.setLevel(level)


def _parse(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _in_threads(*targets: Any) -> None:
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)


def test_concurrent_jobs_log_only_their_own_ids(log_lines: io.StringIO) -> None:
    both_inside = threading.Barrier(2, timeout=60)  # fails only on a real hang

    def job(job_id: str) -> None:
        with log_context(jobId=job_id, correlation_id=job_id, kind="summary"):
            both_inside.wait()  # the other job's keys are set now too
            for _ in range(20):
                logger.info("working", extra={"writer": job_id})
            both_inside.wait()
        logger.info("after the job", extra={"writer": job_id})

    _in_threads(lambda: job("job-a"), lambda: job("job-b"))
    lines = _parse(log_lines)
    working = [line for line in lines if line["message"] == "working"]
    assert len(working) == 40
    assert all(line["jobId"] == line["correlation_id"] == line["writer"] for line in working)
    after = [line for line in lines if line["message"] == "after the job"]
    assert len(after) == 2
    assert all("jobId" not in line and "correlation_id" not in line for line in after)


def test_nested_contexts_restore_the_outer_keys(log_lines: io.StringIO) -> None:
    with log_context(jobId="outer", kind="summary"):
        with log_context(jobId="inner", attempt=2):
            logger.info("inner")
        logger.info("outer")
    logger.info("outside")
    inner, outer, outside = _parse(log_lines)
    assert (inner["jobId"], inner["attempt"], inner["kind"]) == ("inner", 2, "summary")
    assert (outer["jobId"], outer["kind"]) == ("outer", "summary")
    assert "attempt" not in outer
    assert not {"jobId", "kind"} & set(outside)


def test_each_invocation_logs_its_own_lambda_context(log_lines: io.StringIO) -> None:
    both_inside = threading.Barrier(2, timeout=60)  # fails only on a real hang

    @log_lambda_context(correlation_id_path="requestContext.requestId")
    def handler(event: dict[str, Any], context: Any) -> str:
        both_inside.wait()
        logger.info("handling", extra={"writer": event["requestContext"]["requestId"]})
        both_inside.wait()
        return str(context.function_name)

    def invoke(function: str, request_id: str) -> None:
        for _ in range(2):
            handler({"requestContext": {"requestId": request_id}}, LambdaContext(function))
        logger.info("between invocations", extra={"writer": request_id})

    _in_threads(
        lambda: invoke("test-logging-api", "request-api"),
        lambda: invoke("test-logging-consumer", "request-consumer"),
    )
    lines = _parse(log_lines)
    handling = [line for line in lines if line["message"] == "handling"]
    assert len(handling) == 4
    for line in handling:
        function = "test-logging-" + line["writer"].removeprefix("request-")
        assert (line["function_name"], line["correlation_id"]) == (function, line["writer"])
        assert line["function_arn"].endswith(f":function:{function}")
    first = {line["function_name"]: line["cold_start"] for line in reversed(handling)}
    assert first == {"test-logging-api": True, "test-logging-consumer": True}
    assert sorted(line["cold_start"] for line in handling) == [False, False, True, True]
    between = [line for line in lines if line["message"] == "between invocations"]
    assert all("function_name" not in line and "correlation_id" not in line for line in between)
