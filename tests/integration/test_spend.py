"""Spend on every job: usage and cost on the succeeded row, and a ModelSpend EMF line per job."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aijobs import observability, pricing
from aijobs.domain import JobStatus
from tests.integration.harness import CountingProvider, Stage

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. The consumer loads the row and calls the model."


class PricedProvider(CountingProvider):
    """The local provider's work, reported the way a real adapter does: its own name, model and
    usage, and no cost of its own (so the consumer prices it from the table)."""

    def __init__(self, name: str, model: str, usage: dict[str, int]) -> None:
        super().__init__()
        self.name = name
        self._model = model
        self._usage = usage

    def after(self, result: Any) -> Any:
        return result.model_copy(update={"model": self._model, "usage": self._usage, "cost": None})


@pytest.fixture(autouse=True)
def _metrics_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    pricing._warned.clear()


def _emf(out: str, name: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.splitlines() if '"_aws"' in line]
    return [line for line in lines if name in line]


def _metric(line: dict[str, Any]) -> tuple[str, list[str], str]:
    (directive,) = line["_aws"]["CloudWatchMetrics"]
    (metric,) = directive["Metrics"]
    (dimensions,) = directive["Dimensions"]
    return metric["Name"], sorted(dimensions), metric.get("Unit", "")


def test_a_priced_job_carries_usage_and_cost_and_emits_model_spend(
    stage: Stage, capfd: pytest.CaptureFixture[str]
) -> None:
    usage = {"inputTokens": 2000, "outputTokens": 500}
    stage.provider = PricedProvider("bedrock", "us.amazon.nova-lite-v1:0", usage)
    job = stage.submit("alice", "summary", TEXT)
    (outcome,) = stage.drain("summary")
    assert outcome.failed_ids == []

    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.model == "us.amazon.nova-lite-v1:0"
    assert row.usage == usage
    # 2,000 x $0.06/M + 500 x $0.24/M
    assert row.cost == pytest.approx(0.00024)

    (line,) = _emf(capfd.readouterr().out, "ModelSpend")
    assert _metric(line) == ("ModelSpend", ["kind", "model", "service"], "None")
    assert line["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "aijobs"
    assert (line["kind"], line["model"]) == ("summary", "amazon.nova-lite-v1:0")
    assert line["ModelSpend"] in (pytest.approx(0.00024), [pytest.approx(0.00024)])


def test_the_local_provider_shows_the_flow_at_zero_cost(
    stage: Stage, capfd: pytest.CaptureFixture[str]
) -> None:
    job = stage.submit("alice", "summary", TEXT)
    list(stage.drain("summary"))

    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.usage  # the local provider reports what it "used"
    assert row.cost == 0.0

    (line,) = _emf(capfd.readouterr().out, "ModelSpend")
    assert (line["kind"], line["model"]) == ("summary", "local")
    assert line["ModelSpend"] in (0, 0.0, [0.0])


def test_an_unpriced_model_still_succeeds_without_cost_or_metric(
    stage: Stage, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    warnings: list[str] = []
    monkeypatch.setattr(observability.logger, "warning", lambda message, **_: warnings.append(message))
    stage.provider = PricedProvider("bedrock", "mystery.model-v9", {"inputTokens": 10, "outputTokens": 2})
    first = stage.submit("alice", "summary", TEXT)
    second = stage.submit("bob", "summary", TEXT)
    list(stage.drain("summary"))

    for job in (first, second):
        row = stage.job(job)
        assert row.status is JobStatus.SUCCEEDED
        assert row.usage == {"inputTokens": 10, "outputTokens": 2}
        assert row.cost is None

    out = capfd.readouterr().out
    assert _emf(out, "ModelSpend") == []
    assert len(_emf(out, "JobsSucceeded")) == 2
    # Once per model, not once per job.
    assert warnings == ["model not in the price table (model_prices.json): job cost unknown"]


def test_images_are_priced_by_the_size_the_adapter_reports(
    stage: Stage, capfd: pytest.CaptureFixture[str]
) -> None:
    # Two 1792x1024 images, the size DALL-E 3 makes for 16:9 (the adapter reports it).
    stage.provider = PricedProvider("openai", "dall-e-3", {"images": 2, "imagePixels": 1792 * 1024})
    job = stage.submit("alice", "image-generate", "a red lighthouse", options={"aspectRatio": "16:9"})
    list(stage.drain("image-generate"))

    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.cost == pytest.approx(0.16)  # 2 standard images of 1792x1024 at $0.08
    (line,) = _emf(capfd.readouterr().out, "ModelSpend")
    assert (line["kind"], line["model"]) == ("image-generate", "dall-e-3")
