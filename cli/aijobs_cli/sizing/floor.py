"""The design's floor: what a workload would cost with the fewest calls, units and GB-seconds this
architecture allows, printed beside `aijobs cost`'s estimate so the gap between them stays visible.

Per job, the floor keeps only the design's own work (docs/design.md §2 and §4):

- one submit and one status read, through API Gateway and the API function: 2 requests and 2
  invocations of `api_avg_ms`; the read is 0.5 RRU (one eventually consistent read of a row under
  4 KB);
- one SendMessage; receives and acks in full batches of 10 (SQS's most per call);
- the job row written three times, 1 WRU each (a row under 1 KB): created in one transaction with
  the credit debit (two items at 2 WRU each), claimed and finished; no index entry, no S3 object;
- the consumer waiting on the model once per batch of 10 (the batch's records waiting together):
  `consumer_avg_seconds` x its memory / 10 per delivery; a retry is one more delivery, with its claim
  and its failure (2 WRU).

Dead letters, re-checks and the fixed costs (empty polls, crons) are left out: the floor is compared
with the estimate's variable part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aijobs_cli.sizing.cost_lines import (
    MILLION,
    SQS_MAX_MESSAGES_PER_CALL,
    batched_calls,
    chunks,
    gb_seconds,
    receive_requests,
)

if TYPE_CHECKING:
    from aijobs_cli.sizing.cost import Estimate, PriceTable, Workload

#: The job row's writes on a first try: the create transaction (row and credit balance, 2 WRU
#: each), the claim and the finish.
FIRST_TRY_WRU = 2 * 2 + 1 + 1
#: A retried delivery's writes: its claim and its failure.
RETRY_WRU = 2
#: The status read: one eventually consistent GetItem of a row under 4 KB.
STATUS_READ_RRU = 0.5


@dataclass(frozen=True)
class Floor:
    """The floor per service for the month, and what it comes to per 1M jobs."""

    jobs: int
    by_service: dict[str, float]

    @property
    def total_usd(self) -> float:
        return math.fsum(self.by_service.values())

    @property
    def per_million_jobs_usd(self) -> float:
        return self.total_usd / self.jobs * MILLION

    def summary(self) -> str:
        parts = ", ".join(
            f"{service} ${usd / self.jobs * MILLION:,.2f}" for service, usd in self.by_service.items()
        )
        return f"${self.per_million_jobs_usd:,.2f} ({parts})"


def design_floor(w: Workload, prices: PriceTable) -> Floor:
    """The month's floor for `w` at `prices` (this module's docstring says what it counts)."""
    jobs, retries = w.jobs_per_month, w.retries
    deliveries = jobs + retries
    batch = SQS_MAX_MESSAGES_PER_CALL
    api_calls = 2 * jobs
    api = api_calls / MILLION * (prices.apigw_http_per_million_requests + prices.lambda_per_million_requests)
    api += gb_seconds(api_calls, w.api_avg_ms / 1000, w.api_memory_mb) * prices.lambda_arm64_per_gb_second
    sqs_requests = (
        jobs * chunks_of(w) + receive_requests(deliveries, batch, w.message_kb) + batched_calls(jobs, batch)
    )
    consumer_gbs = gb_seconds(deliveries, w.consumer_avg_seconds, w.consumer_memory_mb) / batch
    consumer = batched_calls(deliveries, batch) / MILLION * prices.lambda_per_million_requests
    consumer += consumer_gbs * prices.lambda_arm64_per_gb_second
    writes = jobs * FIRST_TRY_WRU + retries * RETRY_WRU
    dynamodb = writes / MILLION * prices.dynamodb_per_million_write_units
    dynamodb += jobs * STATUS_READ_RRU / MILLION * prices.dynamodb_per_million_read_units
    return Floor(
        jobs=jobs,
        by_service={
            "API": api,
            "SQS": sqs_requests / MILLION * prices.sqs_standard_per_million_requests,
            "consumer": consumer,
            "DynamoDB": dynamodb,
        },
    )


def chunks_of(w: Workload) -> int:
    """64 KB chunks SQS bills for one of the workload's messages."""
    from decimal import Decimal

    return chunks(Decimal(str(w.message_kb)))


def floor_sentence(estimate: Estimate) -> str:
    """The line `aijobs cost` prints under its per-1M figures."""
    floor = design_floor(estimate.workload, estimate.prices)
    ratio = estimate.variable_per_million_jobs_usd / floor.per_million_jobs_usd
    return (
        f"Design floor per 1M jobs: {floor.summary()}; the variable estimate is {ratio:.1f}x it "
        "(the fewest calls, units and GB-s of this design: aijobs_cli/sizing/floor.py)"
    )
