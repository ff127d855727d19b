"""The design's floor beside `aijobs cost`'s estimate (aijobs_cli.sizing.floor), derived by hand."""

from __future__ import annotations

import pytest

from aijobs_cli.sizing.cost import DEFAULT_PRICES, Workload, estimate, render_text, to_dict
from aijobs_cli.sizing.floor import FIRST_TRY_WRU, design_floor

P = DEFAULT_PRICES


def test_the_floor_counts_the_designs_own_work_per_job() -> None:
    # 1,000 jobs, 100 retried once each (none dead-lettered): 1,100 deliveries.
    w = Workload(jobs_per_month=1000, retry_rate=0.1, dlq_rate=0, api_avg_ms=40, api_memory_mb=256,
                 consumer_avg_seconds=3, consumer_memory_mb=512)  # fmt: skip
    floor = design_floor(w, P).by_service
    per_request = P.apigw_http_per_million_requests + P.lambda_per_million_requests
    assert floor["API"] == pytest.approx(
        2000 * per_request / 1e6 + 2000 * 0.040 * 0.25 * P.lambda_arm64_per_gb_second
    )
    # One send per job, receives and acks ten at a time.
    assert floor["SQS"] == pytest.approx((1000 + 110 + 100) * P.sqs_standard_per_million_requests / 1e6)
    # The batch of ten waits on the model once: a tenth of each delivery's wait.
    assert floor["consumer"] == pytest.approx(
        110 * P.lambda_per_million_requests / 1e6 + 1100 * 3 * 0.5 / 10 * P.lambda_arm64_per_gb_second
    )
    assert FIRST_TRY_WRU == 6  # the create transaction's two items at 2 WRU, the claim, the finish
    assert floor["DynamoDB"] == pytest.approx(
        (1000 * 6 + 100 * 2) * P.dynamodb_per_million_write_units / 1e6
        + 1000 * 0.5 * P.dynamodb_per_million_read_units / 1e6
    )


def test_the_estimate_prints_its_floor_and_stays_above_it() -> None:
    w = Workload(jobs_per_month=1_000_000, retry_rate=0.05, dlq_rate=0.01)
    est = estimate(w)
    floor = design_floor(w, P).per_million_jobs_usd
    assert 0 < floor < est.variable_per_million_jobs_usd
    text = render_text(est)
    assert f"Design floor per 1M jobs: ${floor:,.2f}" in text
    assert f"{est.variable_per_million_jobs_usd / floor:.1f}x it" in text
    assert to_dict(est)["design_floor_per_million_jobs_usd"] == pytest.approx(floor)
    # The floor moves with the workload's own figures: a longer model wait costs more.
    slower = design_floor(w.model_copy(update={"consumer_avg_seconds": 4.0}), P).per_million_jobs_usd
    assert slower > floor
