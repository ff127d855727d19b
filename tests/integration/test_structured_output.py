"""A text kind with an output model, through the real consumer on moto: an answer that does not
match the model is a retryable `invalid_output` (each attempt spent), then final with the budget."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel

from aijobs.domain import JobStatus
from aijobs.kinds import registry
from aijobs.providers.base import TextResult
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration


class Verdict(BaseModel):
    verdict: str
    score: float


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {**stage_values, "QUEUE_NAMES": "summary", "MAX_RETRIES": "2"}


@pytest.fixture
def structured_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """`summary` declared with an output model (as a team's own kind would be)."""
    declared = replace(registry.require("summary"), output=Verdict, shape=None)
    real = registry.require
    monkeypatch.setattr(registry, "require", lambda name: declared if name == "summary" else real(name))


def _drain(stage: Stage) -> None:
    mapping = stage.mapping("summary")
    for _ in range(12):
        if mapping.poll_once().received == 0:
            return


@pytest.mark.usefixtures("structured_summary")
def test_a_valid_answer_is_the_jobs_output(stage: Stage) -> None:
    job = stage.submit("alice", "summary", "A calm sea. Good weather today.")
    _drain(stage)
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    Verdict.model_validate(row.result["output"])


@pytest.mark.usefixtures("structured_summary")
def test_an_invalid_answer_is_retried_then_final(stage: Stage) -> None:
    def invalid(result: Any) -> Any:
        return (
            TextResult(text='{"verdict": "ok"}', model=result.model)
            if isinstance(result, TextResult)
            else result
        )

    stage.provider.after = invalid  # type: ignore[method-assign]
    job = stage.submit("alice", "summary", "A calm sea.")
    _drain(stage)
    # The budget spent, the consumer dead-lettered it; the DLQ consumer ends it for good.
    assert stage.dlq_mapping("summary").poll_once().received == 1
    row = stage.job(job)
    assert (row.status, row.last_error_class, row.attempts) == (JobStatus.FAILED_FINAL, "invalid_output", 3)
    assert "does not match its output model" in str(row.last_error_message)
