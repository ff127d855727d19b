"""Monthly cost estimate for an aijobs deployment, next to the source article's Cloudflare count.

Pure arithmetic (DESIGN.md §8): a dated, editable price table, a workload description, and one
`CostLine` per billable item with the derivation written out, so a reviewer can check every
number by hand. Nothing here calls AWS.

How the AWS side is modelled (this project's code paths, not a generic SQS app):

- A job's first attempt fails with probability `retry_rate`. Of those, `dlq_rate` (a share of
  *all* jobs, so `dlq_rate <= retry_rate`) fail every attempt and end in the DLQ; the rest succeed
  on their second attempt. A dead-lettered job is attempted `max_retries + 1` times.
- A retry is `ChangeMessageVisibility(back-off)` + a partial-batch failure: the same message comes
  back, so a retry is a re-receive, not a re-send. Past the cap the consumer itself sends the body
  to the DLQ (`SendMessage`) and acknowledges, so the main-queue message is deleted once per job.
- "Provider still running" re-checks re-send a delayed message (`provider_rechecks_per_job`,
  default 0); each re-check is one more delivery to the consumer.
- Every main queue and every DLQ has a Lambda event-source mapping, so all `2 x queues` queues are
  long-polled around the clock, whether or not there is traffic.
- Free tiers (SQS 1M requests, Lambda 1M requests + 400,000 GB-s, Scheduler 14M invocations, the
  Workers Paid 1M included Queues operations, ...) are *not* subtracted on either side: they are
  per account and shared with everything else the account runs.
- The model line (only when the workload names a `model`) prices each succeeded job's usage with the
  same table the consumer prices every job with (`aijobs/model_prices.json`, via `aijobs.pricing`).
"""

from __future__ import annotations

import math
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aijobs.pricing import ModelPriceTable, default_table

#: SQS bills each 64 KB chunk of a request's payload as one request; Cloudflare Queues bills each
#: 64 KB written, read or deleted as one operation.
CHUNK_KB = 64
#: Messages one ReceiveMessage call can return, and entries one DeleteMessageBatch can hold.
SQS_MAX_MESSAGES_PER_CALL = 10
#: WaitTimeSeconds of the event-source mapping's long polls (the SQS maximum; Lambda uses it).
LONG_POLL_SECONDS = 20
#: The price quantities are per this many units.
MILLION = 1_000_000
THOUSAND = 1_000
KB_PER_GB = 1024 * 1024

ASSUMPTIONS: tuple[str, ...] = (
    "Free tiers are not subtracted (AWS or Cloudflare): they are per account and shared.",
    "Every main queue and every DLQ is long-polled by its event-source mapping: esm_pollers concurrent "
    f"{LONG_POLL_SECONDS}-second ReceiveMessage calls, around the clock; each empty poll is a billable "
    "SQS request. Counted in full (polls that did return messages are not subtracted: an upper bound).",
    "Batches are full: one ReceiveMessage returns min(batch_size, 10) messages and one consumer "
    "invocation gets batch_size messages. At low traffic batches are mostly singletons: set "
    "batch_size=1 for the worst case. batch_window_seconds does not change the counts.",
    "SQS bills per 64 KB chunk of payload: SendMessage per message, ReceiveMessage per batch payload. "
    "DeleteMessageBatch, ChangeMessageVisibility and empty polls carry no message body: 1 request each.",
    "consumer_avg_seconds is per delivered message (a batch's records run one after another); "
    "duration is not rounded up per invocation.",
    "DynamoDB units are request units as billed (a transactional write is 2 WRU per item <= 1 KB, a "
    "strongly consistent read of <= 4 KB is 1 RRU); the *_per_* workload fields already include that.",
    "Cron runs' own DynamoDB and SQS work, SNS alerts, CloudWatch logs/metrics, X-Ray and data transfer "
    "are not counted.",
    "The model's tokens/images/seconds/characters are counted only when the workload names a model: per "
    "succeeded job (failed attempts and dead-lettered jobs are assumed unbilled), from the model price "
    "table aijobs/model_prices.json (list prices: verify them against the providers' pages).",
    "The Cloudflare figure is the article's rough count (queue operations only), for comparison.",
)


class PriceTable(BaseModel):
    """List prices (USD) used by `estimate`, with the date they were read; edit and save as JSON.

    Region us-east-1, on-demand/standard tiers, the first volume tier of each service.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    as_of: date
    region: str = "us-east-1"
    # https://aws.amazon.com/sqs/pricing/ -- standard queue, per 1M requests after the free tier
    # (each 64 KB chunk of a payload is billed as 1 request).
    sqs_standard_per_million_requests: float = Field(ge=0)
    # https://aws.amazon.com/lambda/pricing/ -- requests, per 1M (same for x86 and arm64).
    lambda_per_million_requests: float = Field(ge=0)
    # https://aws.amazon.com/lambda/pricing/ -- arm64 duration, per GB-second (first 7.5B GB-s/month).
    lambda_arm64_per_gb_second: float = Field(ge=0)
    # https://aws.amazon.com/dynamodb/pricing/on-demand/ -- Standard table class, per 1M WRU.
    dynamodb_per_million_write_units: float = Field(ge=0)
    # https://aws.amazon.com/dynamodb/pricing/on-demand/ -- Standard table class, per 1M RRU.
    dynamodb_per_million_read_units: float = Field(ge=0)
    # https://aws.amazon.com/api-gateway/pricing/ -- HTTP APIs, per 1M requests (first 300M/month,
    # each 512 KB increment of a request is one request).
    apigw_http_per_million_requests: float = Field(ge=0)
    # https://aws.amazon.com/eventbridge/pricing/ -- Scheduler, per 1M invocations after the free tier.
    scheduler_per_million_invocations: float = Field(ge=0)
    # https://aws.amazon.com/s3/pricing/ -- S3 Standard PUT/COPY/POST/LIST, per 1,000 requests.
    s3_put_per_thousand: float = Field(ge=0)
    # https://aws.amazon.com/s3/pricing/ -- S3 Standard GET/SELECT, per 1,000 requests.
    s3_get_per_thousand: float = Field(ge=0)
    # https://aws.amazon.com/s3/pricing/ -- S3 Standard storage, per GB-month (first 50 TB).
    s3_storage_per_gb_month: float = Field(ge=0)
    # https://developers.cloudflare.com/queues/platform/pricing/ -- per 1M operations beyond the
    # 1M included in Workers Paid (the article quotes the same $0.40).
    cloudflare_queues_per_million_operations: float = Field(ge=0)

    @classmethod
    def from_json(cls, path: str | Path) -> Self:
        """Load a price table saved with `to_json` (and possibly edited by hand)."""
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def to_json(self) -> str:
        """The table as indented JSON, ready to save, edit and load back with `from_json`."""
        return self.model_dump_json(indent=2) + "\n"


DEFAULT_PRICES = PriceTable(
    as_of=date(2025, 11, 1),
    region="us-east-1",
    sqs_standard_per_million_requests=0.40,
    lambda_per_million_requests=0.20,
    lambda_arm64_per_gb_second=0.0000133334,
    dynamodb_per_million_write_units=0.625,
    dynamodb_per_million_read_units=0.125,
    apigw_http_per_million_requests=1.00,
    scheduler_per_million_invocations=1.00,
    s3_put_per_thousand=0.005,
    s3_get_per_thousand=0.0004,
    s3_storage_per_gb_month=0.023,
    cloudflare_queues_per_million_operations=0.40,
)


class Workload(BaseModel):
    """What a month of traffic looks like. Rates are fractions of all jobs.

    `retry_rate` is the share of jobs whose first attempt fails (retryably); `dlq_rate` is the
    share that fails every attempt and ends in the DLQ. A dead-lettered job was retried first, so
    `dlq_rate <= retry_rate` is enforced (the article's 95% + 5% = 100% has its 1% DLQ inside
    the 5%). The jobs in `retry_rate - dlq_rate` succeed on their one retry.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    jobs_per_month: int = Field(gt=0)
    retry_rate: float = Field(default=0.0, ge=0, le=1)
    dlq_rate: float = Field(default=0.0, ge=0, le=1)
    max_retries: int = Field(default=3, ge=1, le=100)
    #: Size of one queue message (a reference, not the input: DESIGN.md §2). SQS max is 1 MiB.
    message_kb: float = Field(default=1.0, gt=0, le=1024)
    batch_size: int = Field(default=5, ge=1, le=10_000)
    batch_window_seconds: int = Field(default=10, ge=0, le=300)
    consumer_memory_mb: int = Field(default=512, ge=128, le=10_240)
    #: Consumer time per delivered message (seconds), mostly waiting on the model provider.
    consumer_avg_seconds: float = Field(default=2.0, ge=0)
    api_memory_mb: int = Field(default=256, ge=128, le=10_240)
    api_avg_ms: float = Field(default=50.0, ge=0)
    status_polls_per_job: float = Field(default=3.0, ge=0)
    #: Concurrent long polls the event-source mapping keeps open on each queue (Lambda starts at 5).
    esm_pollers: int = Field(default=5, ge=0)
    #: Job kinds; each has a main queue and a DLQ, both with an event-source mapping.
    queues: int = Field(default=5, ge=1)
    hours_per_month: float = Field(default=730.0, gt=0)
    #: DynamoDB WRU per consumer attempt (claim, finish, plus one).
    dynamodb_writes_per_attempt: int = Field(default=3, ge=0)
    #: DynamoDB WRU per submit: job row + idempotency record in one transaction (2 WRU per item).
    dynamodb_writes_per_submit: int = Field(default=4, ge=0)
    #: DynamoDB RRU per submit (API key / tenant lookup), per status poll, per consumer attempt.
    dynamodb_reads_per_submit: int = Field(default=1, ge=0)
    dynamodb_reads_per_poll: int = Field(default=1, ge=0)
    dynamodb_reads_per_attempt: int = Field(default=1, ge=0)
    #: S3 objects written per succeeded job (result.json + artifacts), downloads per succeeded job.
    result_puts_per_job: int = Field(default=2, ge=0)
    result_gets_per_job: int = Field(default=1, ge=0)
    #: Stored result bytes per succeeded job and how long they are kept (steady state).
    result_kb_per_job: float = Field(default=100.0, ge=0)
    result_retention_months: float = Field(default=1.0, ge=0)
    #: "Provider still running" re-checks per job; each re-sends a delayed message.
    provider_rechecks_per_job: float = Field(default=0.0, ge=0)
    dlq_consumer_memory_mb: int = Field(default=256, ge=128, le=10_240)
    dlq_consumer_avg_ms: float = Field(default=200.0, ge=0)
    crons_per_hour: float = Field(default=6.0, ge=0)
    cron_memory_mb: int = Field(default=256, ge=128, le=10_240)
    cron_avg_seconds: float = Field(default=1.0, ge=0)
    #: The model line (none without a model): the model id, its provider (the adapter's name), the
    #: usage of one succeeded job in the adapter's usage keys ({"inputTokens": 2000, "outputTokens":
    #: 300}, {"images": 1}, {"characters": 1500}, ...) and the job options that pick an image tier.
    model: str | None = Field(default=None, min_length=1)
    model_provider: str = Field(default="bedrock", min_length=1)
    model_usage_per_job: dict[str, float] = Field(default_factory=dict)
    model_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _model_usage(self) -> Self:
        if any(value < 0 for value in self.model_usage_per_job.values()):
            raise ValueError("model_usage_per_job values must not be negative")
        return self

    @model_validator(mode="after")
    def _dlq_within_retries(self) -> Self:
        if self.dlq_rate > self.retry_rate:
            raise ValueError(
                f"dlq_rate ({self.dlq_rate}) > retry_rate ({self.retry_rate}): a job only reaches the DLQ "
                "after its first attempt failed, so dead-lettered jobs are a subset of retried ones"
            )
        return self

    @property
    def retried_jobs(self) -> int:
        """Jobs whose first attempt fails (article: "5% retry 一次")."""
        return _share(self.jobs_per_month, self.retry_rate)

    @property
    def dead_lettered_jobs(self) -> int:
        """Jobs that end in the DLQ after `max_retries` retries."""
        return _share(self.jobs_per_month, self.dlq_rate)

    @property
    def recovered_jobs(self) -> int:
        """Retried jobs that succeed on their one retry."""
        return self.retried_jobs - self.dead_lettered_jobs

    @property
    def succeeded_jobs(self) -> int:
        return self.jobs_per_month - self.dead_lettered_jobs

    @property
    def retries(self) -> int:
        """Re-deliveries: one per recovered job, `max_retries` per dead-lettered job."""
        return self.recovered_jobs + self.dead_lettered_jobs * self.max_retries

    @property
    def attempts(self) -> int:
        return self.jobs_per_month + self.retries

    @property
    def rechecks(self) -> int:
        return _share(self.jobs_per_month, self.provider_rechecks_per_job)

    @property
    def deliveries(self) -> int:
        """Messages handed to the main-queue consumers: every attempt plus every re-check."""
        return self.attempts + self.rechecks


class CostLine(BaseModel):
    """One billable item: `monthly_usd = quantity / price_basis * unit_price`."""

    model_config = ConfigDict(frozen=True)

    service: str
    item: str
    quantity: float
    unit: str
    #: USD per `price_basis` units (the number as it appears on the pricing page).
    unit_price: float
    price_basis: int = 1
    monthly_usd: float
    how: str


class Estimate(BaseModel):
    """The priced lines for one workload, plus the article's Cloudflare Queues figure."""

    model_config = ConfigDict(frozen=True)

    workload: Workload
    prices: PriceTable
    lines: list[CostLine]
    cloudflare_operations: int
    cloudflare_usd: float

    @property
    def aws_total_usd(self) -> float:
        """Sum of every line."""
        return math.fsum(line.monthly_usd for line in self.lines)

    def by_service(self) -> dict[str, float]:
        """Subtotal per service, in line order."""
        totals: dict[str, float] = {}
        for line in self.lines:
            totals[line.service] = totals.get(line.service, 0.0) + line.monthly_usd
        return totals

    def quantity(self, service: str, item: str) -> float:
        """The quantity of one line (KeyError if there is no such line)."""
        for line in self.lines:
            if line.service == service and line.item == item:
                return line.quantity
        raise KeyError(f"{service}: {item}")


# --- arithmetic helpers -----------------------------------------------------------------------


def _share(total: int, rate: float) -> int:
    """`total * rate` rounded half up, in decimal so 20,000 x 0.05 is exactly 1,000."""
    return int((Decimal(total) * Decimal(str(rate))).to_integral_value(rounding=ROUND_HALF_UP))


def _chunks(payload_kb: Decimal) -> int:
    """64 KB chunks billed for a payload (at least one)."""
    return max(1, math.ceil(payload_kb / CHUNK_KB))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _batched_calls(messages: int, per_call: int) -> int:
    return _ceil_div(messages, per_call) if messages else 0


def _receive_requests(messages: int, per_call: int, message_kb: float) -> int:
    """Billed requests of the ReceiveMessage calls returning `messages`, `per_call` at a time.

    Each call is billed per 64 KB chunk of its whole payload (all returned messages together).
    """
    kb = Decimal(str(message_kb))
    full, rest = divmod(messages, per_call)
    return full * _chunks(kb * per_call) + (_chunks(kb * rest) if rest else 0)


def _gb_seconds(count: int, seconds: float, memory_mb: int) -> float:
    return count * seconds * memory_mb / 1024


# --- Cloudflare (the article) -----------------------------------------------------------------


def cloudflare_operations(workload: Workload) -> int:
    """Cloudflare Queues operations for the workload, counted the way the source article does.

    ``chunks * (3 * jobs + retried_jobs + dead_lettered_jobs)`` with ``chunks = ceil(message_kb / 64)``:

    - every message is written once, read once and deleted once, each per 64 KB ("每 64KB 写、读、
      删各算 operation", "一条小于 64KB 的消息正常投递通常是 1 次写、1 次读、1 次删");
    - a retry adds one read ("每一次 retry 都会多一次读取操作"); the article's workload retries each
      retried job once ("5% retry 一次");
    - a move to the DLQ adds one write (its cost table: ``messages * 3 + retry_reads + dlq_writes``).

    The article's example, 20,000 jobs with 5% retried once and 1% dead-lettered, is
    ``20,000 * 3 + 1,000 + 200 = 61,200``. It is a rough count ("粗算"): it charges one retry read
    even to a dead-lettered job that really used ``max_retries`` of them, and no DLQ-consumer read
    or delete. Counted strictly (3 retries per dead-lettered job, DLQ read + delete) the example
    would be 62,000; `max_retries` is deliberately not used here so the article's figure reproduces.
    """
    chunks = _chunks(Decimal(str(workload.message_kb)))
    messages = workload.jobs_per_month
    return chunks * (3 * messages + workload.retried_jobs + workload.dead_lettered_jobs)


# --- AWS --------------------------------------------------------------------------------------


def estimate(
    workload: Workload, prices: PriceTable = DEFAULT_PRICES, model_prices: ModelPriceTable | None = None
) -> Estimate:
    """Price one month of `workload` on AWS, line by line, and the article's Cloudflare count.

    With `workload.model`, the model's lines come from `model_prices` (default: the table the
    consumer uses); a model that table does not price is a `ValueError`.
    """
    w = workload
    lines: list[CostLine] = []

    def add(
        service: str, item: str, quantity: float, unit: str, unit_price: float, basis: int, how: str
    ) -> None:
        lines.append(
            CostLine(
                service=service,
                item=item,
                quantity=quantity,
                unit=unit,
                unit_price=unit_price,
                price_basis=basis,
                monthly_usd=quantity / basis * unit_price,
                how=how,
            )
        )

    jobs, dlq, deliveries = w.jobs_per_month, w.dead_lettered_jobs, w.deliveries
    kb = Decimal(str(w.message_kb))
    per_message = _chunks(kb)
    per_receive = min(w.batch_size, SQS_MAX_MESSAGES_PER_CALL)
    per_delete = min(w.batch_size, SQS_MAX_MESSAGES_PER_CALL)
    chunk_note = f"x {per_message} chunk(s) of 64 KB per {w.message_kb:g} KB message"
    fate = (
        f"{jobs:,} jobs: {jobs - w.retried_jobs:,} first try, {w.recovered_jobs:,} after 1 retry, "
        f"{dlq:,} dead-lettered after {w.max_retries} retries"
    )

    # SQS ------------------------------------------------------------------------------------
    sqs = prices.sqs_standard_per_million_requests
    add(
        "SQS", "SendMessage (submits + re-check re-sends)", (jobs + w.rechecks) * per_message,
        "requests", sqs, MILLION,
        f"({jobs:,} submits + {w.rechecks:,} re-checks) {chunk_note}; retries re-receive, never re-send",
    )  # fmt: skip
    add(
        "SQS", "ReceiveMessage (consumer, with messages)",
        _receive_requests(deliveries, per_receive, w.message_kb), "requests", sqs, MILLION,
        f"{deliveries:,} deliveries ({jobs:,} + {w.retries:,} retries + {w.rechecks:,} re-checks) / "
        f"{per_receive} per call, each call billed per 64 KB of its payload",
    )  # fmt: skip
    deleted = jobs + w.rechecks
    add(
        "SQS", "DeleteMessageBatch (consumer acks)", _batched_calls(deleted, per_delete), "requests",
        sqs, MILLION,
        f"{deleted:,} messages deleted once each (dead-lettered ones too: acked after the DLQ send) / "
        f"{per_delete} per call",
    )  # fmt: skip
    add(
        "SQS", "ChangeMessageVisibility (retry back-off)", w.retries, "requests", sqs, MILLION,
        f"one per retry: {w.recovered_jobs:,} x 1 + {dlq:,} x {w.max_retries}; {fate}",
    )  # fmt: skip
    add(
        "SQS", "SendMessage to DLQ", dlq * per_message, "requests", sqs, MILLION,
        f"{dlq:,} dead-lettered jobs, sent by the consumer past the cap {chunk_note}",
    )  # fmt: skip
    add(
        "SQS", "DLQ ReceiveMessage (DLQ consumer)", _receive_requests(dlq, per_receive, w.message_kb),
        "requests", sqs, MILLION, f"{dlq:,} DLQ messages / {per_receive} per call",
    )  # fmt: skip
    add(
        "SQS", "DLQ DeleteMessageBatch", _batched_calls(dlq, per_delete), "requests", sqs, MILLION,
        f"{dlq:,} DLQ messages / {per_delete} per call",
    )  # fmt: skip
    polls_per_poller = int(w.hours_per_month * 3600 // LONG_POLL_SECONDS)
    polled = 2 * w.queues
    add(
        "SQS", "empty long polls (event-source mappings)", w.esm_pollers * polls_per_poller * polled,
        "requests", sqs, MILLION,
        f"{w.esm_pollers} pollers x {polls_per_poller:,} polls ({w.hours_per_month:g} h x 3600 / "
        f"{LONG_POLL_SECONDS} s) x {polled} queues ({w.queues} main + {w.queues} DLQ); "
        "each empty ReceiveMessage is billed",
    )  # fmt: skip

    # Lambda ---------------------------------------------------------------------------------
    lam_req, lam_gbs = prices.lambda_per_million_requests, prices.lambda_arm64_per_gb_second
    polls = _share(jobs, w.status_polls_per_job)
    api_calls = jobs + polls
    consumer_calls = _batched_calls(deliveries, w.batch_size)
    dlq_calls = _batched_calls(dlq, w.batch_size)
    cron_runs = int(w.crons_per_hour * w.hours_per_month)
    add(
        "Lambda", "API (producer) invocations", api_calls, "requests", lam_req, MILLION,
        f"{jobs:,} submits + {polls:,} status polls ({w.status_polls_per_job:g} per job)",
    )  # fmt: skip
    add(
        "Lambda", "API (producer) duration", _gb_seconds(api_calls, w.api_avg_ms / 1000, w.api_memory_mb),
        "GB-seconds", lam_gbs, 1,
        f"{api_calls:,} x {w.api_avg_ms:g} ms x {w.api_memory_mb} MB / 1024 (arm64)",
    )  # fmt: skip
    add(
        "Lambda", "consumer invocations", consumer_calls, "requests", lam_req, MILLION,
        f"{deliveries:,} deliveries / batch of {w.batch_size} (window {w.batch_window_seconds} s)",
    )  # fmt: skip
    add(
        "Lambda", "consumer duration",
        _gb_seconds(deliveries, w.consumer_avg_seconds, w.consumer_memory_mb), "GB-seconds", lam_gbs, 1,
        f"{deliveries:,} deliveries x {w.consumer_avg_seconds:g} s x {w.consumer_memory_mb} MB / 1024",
    )  # fmt: skip
    add(
        "Lambda", "DLQ consumer invocations", dlq_calls, "requests", lam_req, MILLION,
        f"{dlq:,} DLQ messages / batch of {w.batch_size}",
    )  # fmt: skip
    add(
        "Lambda", "DLQ consumer duration",
        _gb_seconds(dlq, w.dlq_consumer_avg_ms / 1000, w.dlq_consumer_memory_mb), "GB-seconds", lam_gbs, 1,
        f"{dlq:,} messages x {w.dlq_consumer_avg_ms:g} ms x {w.dlq_consumer_memory_mb} MB / 1024",
    )  # fmt: skip
    add(
        "Lambda", "cron dispatcher invocations", cron_runs, "requests", lam_req, MILLION,
        f"{w.crons_per_hour:g} runs/h x {w.hours_per_month:g} h",
    )  # fmt: skip
    add(
        "Lambda", "cron dispatcher duration", _gb_seconds(cron_runs, w.cron_avg_seconds, w.cron_memory_mb),
        "GB-seconds", lam_gbs, 1,
        f"{cron_runs:,} runs x {w.cron_avg_seconds:g} s x {w.cron_memory_mb} MB / 1024",
    )  # fmt: skip

    # DynamoDB -------------------------------------------------------------------------------
    passes = deliveries
    writes = jobs * w.dynamodb_writes_per_submit + passes * w.dynamodb_writes_per_attempt + dlq
    reads = (
        jobs * w.dynamodb_reads_per_submit + polls * w.dynamodb_reads_per_poll
        + passes * w.dynamodb_reads_per_attempt
    )  # fmt: skip
    add(
        "DynamoDB", "write request units", writes, "WRU", prices.dynamodb_per_million_write_units, MILLION,
        f"{jobs:,} submits x {w.dynamodb_writes_per_submit} + {passes:,} deliveries x "
        f"{w.dynamodb_writes_per_attempt} + {dlq:,} DLQ records x 1",
    )  # fmt: skip
    add(
        "DynamoDB", "read request units", reads, "RRU", prices.dynamodb_per_million_read_units, MILLION,
        f"{jobs:,} submits x {w.dynamodb_reads_per_submit} + {polls:,} polls x {w.dynamodb_reads_per_poll}"
        f" + {passes:,} deliveries x {w.dynamodb_reads_per_attempt}",
    )  # fmt: skip

    # API Gateway, Scheduler ---------------------------------------------------------------------
    add(
        "API Gateway", "HTTP API requests", api_calls, "requests", prices.apigw_http_per_million_requests,
        MILLION, f"{jobs:,} POST /jobs + {polls:,} GET /jobs/{{id}} (each < 512 KB)",
    )  # fmt: skip
    add(
        "EventBridge Scheduler", "schedule invocations", cron_runs, "invocations",
        prices.scheduler_per_million_invocations, MILLION,
        f"{w.crons_per_hour:g} per hour x {w.hours_per_month:g} h",
    )  # fmt: skip

    # S3 -----------------------------------------------------------------------------------------
    ok = w.succeeded_jobs
    stored_gb = ok * w.result_kb_per_job * w.result_retention_months / KB_PER_GB
    add(
        "S3", "PUT requests", ok * w.result_puts_per_job, "requests", prices.s3_put_per_thousand, THOUSAND,
        f"{ok:,} succeeded jobs x {w.result_puts_per_job} objects (result.json + artifacts)",
    )  # fmt: skip
    add(
        "S3", "GET requests", ok * w.result_gets_per_job, "requests", prices.s3_get_per_thousand, THOUSAND,
        f"{ok:,} succeeded jobs x {w.result_gets_per_job} downloads",
    )  # fmt: skip
    add(
        "S3", "storage", stored_gb, "GB-month", prices.s3_storage_per_gb_month, 1,
        f"{ok:,} jobs x {w.result_kb_per_job:g} KB x {w.result_retention_months:g} month(s) kept",
    )  # fmt: skip

    # Model ---------------------------------------------------------------------------------------
    if w.model is not None:
        for service, item, quantity, unit, unit_price, basis, how in _model_lines(w, model_prices):
            add(service, item, quantity, unit, unit_price, basis, how)

    operations = cloudflare_operations(w)
    return Estimate(
        workload=w,
        prices=prices,
        lines=lines,
        cloudflare_operations=operations,
        cloudflare_usd=operations / MILLION * prices.cloudflare_queues_per_million_operations,
    )


def _model_lines(
    w: Workload, table: ModelPriceTable | None
) -> list[tuple[str, str, float, str, float, int, str]]:
    """One line per billed unit of the workload's model, for its succeeded jobs."""
    assert w.model is not None
    entry = (table or default_table()).lookup(w.model_provider, w.model)
    if entry is None:
        raise ValueError(
            f"model {w.model!r} of provider {w.model_provider!r} is not in the model price table "
            "(aijobs/model_prices.json)"
        )
    ok = w.succeeded_jobs
    dated = f"{entry.provider}/{entry.model} list price as of {entry.as_of.isoformat()}"
    if entry.free:
        return [("Model", f"{w.model} (free)", ok, "jobs", 0.0, 1, f"{ok:,} succeeded jobs; {dated}: free")]
    lines = []
    for unit in entry.unit_prices(w.model_options):
        key = next((key for key in unit.keys if key in w.model_usage_per_job), None)
        if key is None:
            continue
        per_job = w.model_usage_per_job[key]
        note = f" ({unit.note})" if unit.note else ""
        lines.append(
            (
                "Model",
                f"{w.model} {unit.unit}",
                ok * per_job,
                unit.unit,
                unit.usd,
                unit.basis,
                f"{ok:,} succeeded jobs x {per_job:g} {key} per job; {dated}{note}",
            )
        )
    if not lines:
        wanted = ", ".join(unit.keys[0] for unit in entry.unit_prices(w.model_options))
        raise ValueError(f"model_usage_per_job gives none of the units {w.model!r} is billed by ({wanted})")
    return lines


# --- output -----------------------------------------------------------------------------------


def _price(line: CostLine) -> str:
    basis = {MILLION: "/M", THOUSAND: "/1K", 1: ""}.get(line.price_basis, f"/{line.price_basis:,}")
    return f"${_plain(line.unit_price)}{basis}"


def _plain(value: float) -> str:
    """A price without exponent notation: 0.0000133334, not 1.33334e-05."""
    return f"{value:.10f}".rstrip("0").rstrip(".") or "0"


def _quantity(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def render_text(estimate: Estimate) -> str:
    """A plain-text table: one row per line with its derivation underneath, then the totals."""
    p, w = estimate.prices, estimate.workload
    header = ("service", "item", "quantity", "unit", "price", "USD/month")
    rows = [
        (
            line.service,
            line.item,
            _quantity(line.quantity),
            line.unit,
            _price(line),
            f"{line.monthly_usd:.4f}",
        )
        for line in estimate.lines
    ]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]

    left_aligned = {0, 1, 3}

    def fmt(cells: tuple[str, ...]) -> str:
        padded = [
            cell.ljust(width) if i in left_aligned else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    out = [
        f"aijobs monthly cost estimate -- {w.jobs_per_month:,} jobs/month, prices {p.region} as of "
        f"{p.as_of.isoformat()} (USD)",
        fmt(header),
        "  ".join("-" * width for width in widths),
    ]
    for line, row in zip(estimate.lines, rows, strict=True):
        out.append(fmt(row))
        out.append(f"    = {line.how}")
    out.append("")
    for service, subtotal in estimate.by_service().items():
        out.append(f"{service:<24}{subtotal:>12.4f}")
    out.append(f"{'AWS total':<24}{estimate.aws_total_usd:>12.4f}")
    out.append("")
    out.append(
        f"Cloudflare Queues (article's count): {estimate.cloudflare_operations:,} operations x "
        f"${_plain(p.cloudflare_queues_per_million_operations)}/M = ${estimate.cloudflare_usd:.4f} "
        "(queue operations only)"
    )
    out.append("")
    out.append("Assumptions:")
    out.extend(f"  - {assumption}" for assumption in ASSUMPTIONS)
    return "\n".join(out) + "\n"


def to_dict(estimate: Estimate) -> dict[str, Any]:
    """A JSON-ready dict (for `--json`): inputs, lines, subtotals, totals and assumptions."""
    return {
        "prices": estimate.prices.model_dump(mode="json"),
        "workload": estimate.workload.model_dump(mode="json"),
        "lines": [line.model_dump(mode="json") for line in estimate.lines],
        "by_service_usd": estimate.by_service(),
        "aws_total_usd": estimate.aws_total_usd,
        "cloudflare_operations": estimate.cloudflare_operations,
        "cloudflare_usd": estimate.cloudflare_usd,
        "assumptions": list(ASSUMPTIONS),
    }
