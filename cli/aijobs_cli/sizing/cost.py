"""Monthly cost estimate for an aijobs deployment, next to the source article's Cloudflare count.

Pure arithmetic (docs/design.md §8): a dated, editable price table, a workload description, and one
`CostLine` per billable item with the derivation written out, so a reviewer can check every
number by hand. Nothing here calls AWS.

How the AWS side is modelled (this project's code paths, not a generic SQS app):

- What each code path calls (DynamoDB request units with index writes, SQS requests, S3 puts, SNS
  publishes) is not guessed here: it comes from the measured call profile
  (`aijobs_cli/sizing/call_profile.json`, `aijobs_cli.sizing.call_profile`), one path per outcome. This module
  only says how many times each path runs in a month.
- A job's first attempt fails with probability `retry_rate` (retryably) or `failed_final_rate`
  (for good). Of the retried, `dlq_rate` (a share of *all* jobs, so `dlq_rate <= retry_rate`)
  fail every attempt and end in the DLQ; the rest succeed on their second attempt. A dead-lettered
  job is attempted `max_retries + 1` times: `max_retries` retries, then the last attempt sends it
  to the DLQ.
- A retry is `ChangeMessageVisibility(back-off)` + a partial-batch failure: the same message comes
  back, so a retry is a re-receive, not a re-send. Past the cap the consumer itself sends the body
  to the DLQ (`SendMessage`) and acknowledges, so the main-queue message is deleted once per job.
- Cron runs per hour come from the stage's `CRONS` (how often each 5-field expression fires, on
  average over four years of days), each run costs its handler's measured calls: the meta-table
  calls once per run, the shard-table calls once per shard, the calls on a `KIND#` index partition
  once per shard and job kind. A cron the profile has not measured (one a team added) is priced as
  the dispatcher's own run, its handler's calls left out, and listed as estimated.
- The consumer paths were measured on one plain single-call job (the profile's kind, `summary`):
  every other kind is priced like it and listed as estimated (a workflow's child jobs are jobs of
  their own, to count in `jobs_per_month`).
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
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aijobs.cron import parse_cron
from aijobs.pricing import ModelPriceTable, default_table
from aijobs_cdk.stage_config import StageConfig
from aijobs_cli.sizing.call_profile import REGENERATE, CallProfile, default_profile
from aijobs_cli.sizing.cost_lines import (
    LONG_POLL_SECONDS,
    MILLION,
    THOUSAND,
    CostLine,
    Ledger,
    chunks,
    dynamodb_lines,
    gateway_and_scheduler_lines,
    lambda_lines,
    month_runs,
    s3_and_sns_lines,
    share,
    sqs_lines,
    sqs_mapping_lines,
    unpriced_calls,
)
from aijobs_cli.sizing.floor import design_floor, floor_sentence

ASSUMPTIONS: tuple[str, ...] = (
    "Free tiers are not subtracted (AWS or Cloudflare): they are per account and shared.",
    "Every main queue, every DLQ and the webhook delivery queue is long-polled by its event-source mapping: "
    "esm_pollers concurrent "
    f"{LONG_POLL_SECONDS}-second ReceiveMessage calls, around the clock; each empty poll is a billable "
    "SQS request. Counted in full (polls that did return messages are not subtracted: an upper bound).",
    "Batches are full: one ReceiveMessage returns min(batch_size, 10) messages and one consumer "
    "invocation gets batch_size messages. At low traffic batches are mostly singletons: set "
    "batch_size=1 for the worst case. batch_window_seconds does not change the counts.",
    "SQS bills per 64 KB chunk of payload: SendMessage per message, ReceiveMessage per batch payload. "
    "DeleteMessageBatch, ChangeMessageVisibility and empty polls carry no message body: 1 request each.",
    "consumer_avg_seconds is per delivered message (a batch's records run one after another); "
    "duration is not rounded up per invocation.",
    "DynamoDB request units, SQS requests of the functions themselves, S3 puts and SNS publishes per path "
    "are the measured call profile's (aijobs_cli/sizing/call_profile.json: a transactional write is 2 WRU "
    "per item per started KB, every index entry written 1 WRU per KB); submits are on warm containers "
    "(API key cached).",
    "Every kind's deliveries cost what the profile's measured kind's do (one plain single-call job); a cron "
    "the profile has not measured costs a dispatcher run with nothing to do. Both are listed as estimated.",
    "Provider re-checks cost one SendMessage each; their deliveries' DynamoDB work is not counted. "
    "CloudWatch logs/metrics, X-Ray and data transfer are not counted.",
    "Per 1M jobs: the total divided by the jobs (fixed costs -- empty polls, crons -- spread over them); "
    "'variable' leaves the fixed lines out.",
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
    # https://aws.amazon.com/sns/pricing/ -- standard topic publishes, per 1M requests (64 KB each).
    sns_per_million_requests: float = Field(default=0.50, ge=0)
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
    sns_per_million_requests=0.50,
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
    #: Share of jobs whose first attempt fails for good (a 400: no retry, no DLQ).
    failed_final_rate: float = Field(default=0.0, ge=0, le=1)
    #: Share of submits that carry an Idempotency-Key (one more item in the submit transaction).
    idempotency_key_rate: float = Field(default=0.0, ge=0, le=1)
    max_retries: int = Field(default=3, ge=0, le=100)
    #: Size of one queue message (a reference, not the input: docs/design.md §2). SQS max is 1 MiB.
    message_kb: float = Field(default=1.0, gt=0, le=1024)
    batch_size: int = Field(default=5, ge=1, le=10_000)
    batch_window_seconds: int = Field(default=10, ge=0, le=300)
    #: The consumers' memory (CONSUMER_MEMORY_MB; a stage's: the mean of its kinds' own, see
    #: stage_workload). 256: a text kind's consumer (docs/operations/cost.md, "Memory per function").
    consumer_memory_mb: int = Field(default=256, ge=128, le=10_240)
    #: Consumer time per delivered message (seconds), mostly waiting on the model provider.
    consumer_avg_seconds: float = Field(default=2.0, ge=0)
    api_memory_mb: int = Field(default=256, ge=128, le=10_240)
    api_avg_ms: float = Field(default=50.0, ge=0)
    #: GET /jobs/{id} per job: 1 when the client long-polls (`?wait=`, as `aijobs submit --wait`
    #: does) and the job finishes inside the wait; 0 when a webhook tells the client.
    status_polls_per_job: float = Field(default=1.0, ge=0)
    #: Seconds a status call holds the API function waiting for the job (a long-poll is billed as
    #: Lambda duration for its whole wait: about the job's queueing and model time); 0 for short polls.
    poll_wait_seconds: float = Field(default=2.0, ge=0, le=20)
    #: Share of jobs submitted with a callbackUrl: each finished one is one webhook delivery, a POST
    #: that holds the webhook consumer (256 MB) `webhook_post_seconds` (the receiver's answer time).
    webhook_rate: float = Field(default=0.0, ge=0, le=1)
    webhook_post_seconds: float = Field(default=0.3, ge=0, le=30)
    #: Concurrent long polls the event-source mapping keeps open on each queue (Lambda starts at 5).
    esm_pollers: int = Field(default=5, ge=0)
    #: Job kinds; each has a main queue and a DLQ, both with an event-source mapping.
    queues: int = Field(default=5, ge=1)
    #: Their names, when known (the stage's QUEUE_NAMES): to say which ones the profile measured.
    kinds: tuple[str, ...] = ()
    hours_per_month: float = Field(default=730.0, gt=0)
    #: Size of a job row (inline input and result included); None: as measured (a few sentences).
    #: Every job-row read and write, and its index entries, are re-priced at this size.
    job_row_kb: float | None = Field(default=None, gt=0, le=400)
    #: S3 objects a succeeded job writes beyond the measured result object (images, audio, ...),
    #: and downloads per succeeded job.
    artifact_puts_per_job: int = Field(default=0, ge=0)
    result_gets_per_job: int = Field(default=1, ge=0)
    #: Stored result bytes per succeeded job and how long they are kept (steady state).
    result_kb_per_job: float = Field(default=100.0, ge=0)
    result_retention_months: float = Field(default=1.0, ge=0)
    #: "Provider still running" re-checks per job; each re-sends a delayed message.
    provider_rechecks_per_job: float = Field(default=0.0, ge=0)
    dlq_consumer_memory_mb: int = Field(default=256, ge=128, le=10_240)
    dlq_consumer_avg_ms: float = Field(default=200.0, ge=0)
    #: Runs per hour of each configured cron expression (`cron_runs_per_hour(CRONS)`); default: the
    #: dev stage's `*/10` and `*/5`.
    cron_runs: dict[str, float] = Field(default_factory=lambda: {"*/10 * * * *": 6.0, "*/5 * * * *": 12.0})
    #: Tenant shard tables (`SHARD_COUNT`): every cron run repeats its shard calls on each.
    shard_count: int = Field(default=1, ge=1, le=100)
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
        if self.retry_rate + self.failed_final_rate > 1:
            raise ValueError(
                f"retry_rate ({self.retry_rate}) + failed_final_rate ({self.failed_final_rate}) > 1: "
                "they are shares of the same first attempts"
            )
        if any(runs < 0 for runs in self.cron_runs.values()):
            raise ValueError("cron_runs values must not be negative")
        if self.kinds and len(self.kinds) != self.queues:
            raise ValueError(f"kinds names {len(self.kinds)} kinds but queues is {self.queues}")
        return self

    @property
    def retried_jobs(self) -> int:
        """Jobs whose first attempt fails (article: "5% retry 一次")."""
        return share(self.jobs_per_month, self.retry_rate)

    @property
    def dead_lettered_jobs(self) -> int:
        """Jobs that end in the DLQ after `max_retries` retries."""
        return share(self.jobs_per_month, self.dlq_rate)

    @property
    def recovered_jobs(self) -> int:
        """Retried jobs that succeed on their one retry."""
        return self.retried_jobs - self.dead_lettered_jobs

    @property
    def failed_final_jobs(self) -> int:
        """Jobs whose first attempt fails for good."""
        return share(self.jobs_per_month, self.failed_final_rate)

    @property
    def first_try_jobs(self) -> int:
        """Jobs that succeed on their first attempt."""
        return self.jobs_per_month - self.retried_jobs - self.failed_final_jobs

    @property
    def succeeded_jobs(self) -> int:
        return self.jobs_per_month - self.dead_lettered_jobs - self.failed_final_jobs

    @property
    def retries(self) -> int:
        """Re-deliveries: one per recovered job, `max_retries` per dead-lettered job."""
        return self.recovered_jobs + self.dead_lettered_jobs * self.max_retries

    @property
    def attempts(self) -> int:
        return self.jobs_per_month + self.retries

    @property
    def rechecks(self) -> int:
        return share(self.jobs_per_month, self.provider_rechecks_per_job)

    @property
    def deliveries(self) -> int:
        """Messages handed to the main-queue consumers: every attempt plus every re-check."""
        return self.attempts + self.rechecks


class ModelRate(BaseModel):
    """What one priced model would cost per 1M jobs of the workload's usage."""

    model_config = ConfigDict(frozen=True)

    provider: str
    model: str
    usd_per_job: float
    usd_per_million_jobs: float
    as_of: date


class Estimate(BaseModel):
    """The priced lines for one workload, plus the article's Cloudflare Queues figure."""

    model_config = ConfigDict(frozen=True)

    workload: Workload
    prices: PriceTable
    lines: list[CostLine]
    cloudflare_operations: int
    cloudflare_usd: float
    #: Each priced model of every provider for the workload's `model_usage_per_job` (empty without).
    model_rates: list[ModelRate] = Field(default_factory=list)
    #: Calls in the profile of services this estimate has no price for: `service:Operation` -> per month.
    unpriced_calls: dict[str, int] = Field(default_factory=dict)
    #: The kinds the profile's consumer paths were measured on, and the workload's kinds priced like
    #: them without being measured.
    measured_kinds: list[str] = Field(default_factory=list)
    estimated_kinds: list[str] = Field(default_factory=list)
    #: The workload's crons the profile has not measured: priced as the dispatcher's own run.
    estimated_crons: list[str] = Field(default_factory=list)

    def estimated_notes(self) -> list[str]:
        """What was estimated rather than measured, one sentence each (empty: all measured)."""
        notes = []
        if self.estimated_kinds:
            measured = ", ".join(self.measured_kinds) or "the profile's kind"
            notes.append(
                f"kinds {', '.join(self.estimated_kinds)}: priced as the plain single-call job the profile "
                f"measured ({measured}); a workflow's child jobs count as jobs of their own (--jobs)"
            )
        if self.estimated_crons:
            crons = ", ".join(repr(cron) for cron in self.estimated_crons)
            notes.append(
                f"crons {crons}: priced as a dispatcher run whose handler makes no AWS call (its own calls "
                f"are not counted; measure them: {REGENERATE})"
            )
        return notes

    @property
    def aws_total_usd(self) -> float:
        """Sum of every line."""
        return math.fsum(line.monthly_usd for line in self.lines)

    @property
    def aws_backbone_usd(self) -> float:
        """Every line but the model's own."""
        return math.fsum(line.monthly_usd for line in self.lines if line.service != "Model")

    @property
    def per_million_jobs_usd(self) -> float:
        """The AWS backbone (no model) per 1M jobs at this volume, fixed costs spread over the jobs."""
        return self.aws_backbone_usd / self.workload.jobs_per_month * MILLION

    @property
    def variable_per_million_jobs_usd(self) -> float:
        """The AWS backbone per 1M jobs without the fixed lines: what each more job adds."""
        variable = math.fsum(
            line.monthly_usd for line in self.lines if line.service != "Model" and not line.fixed
        )
        return variable / self.workload.jobs_per_month * MILLION

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
    per_message = chunks(Decimal(str(workload.message_kb)))
    messages = workload.jobs_per_month
    return per_message * (3 * messages + workload.retried_jobs + workload.dead_lettered_jobs)


# --- cron runs ----------------------------------------------------------------------------------

#: Days the average is taken over: four years, so leap days and every weekday/day-of-month mix count.
_CRON_DAYS = [date(2025, 1, 1) + timedelta(days=n) for n in range((date(2029, 1, 1) - date(2025, 1, 1)).days)]


def cron_runs_per_hour(expression: str) -> float:
    """How many times a 5-field cron expression fires per hour, on average over four years (so
    `*/10 * * * *` is 6, `0 3 * * *` is 1/24, `0 0 1 * *` about 0.00137)."""
    cron = parse_cron(expression)
    per_day = len(cron.minutes) * len(cron.hours)
    days = sum(
        1
        for day in _CRON_DAYS
        if day.month in cron.months
        and day.day in cron.days_of_month
        and day.isoweekday() % 7 in cron.days_of_week
    )
    return per_day * days / (len(_CRON_DAYS) * 24)


def stage_workload(config: StageConfig) -> dict[str, Any]:
    """The `Workload` fields a stage's configuration decides: its crons' runs per hour, shards,
    job kinds, retries and batching."""
    return {
        "cron_runs": {cron.text: cron_runs_per_hour(cron.text) for cron in config.crons},
        "shard_count": config.shard_count,
        "queues": max(1, len(config.queue_names)),
        "kinds": config.queue_names,
        "max_retries": config.max_retries,
        "batch_size": config.batch_size,
        "batch_window_seconds": config.batch_window_seconds,
        # Jobs are priced as spread evenly over the kinds: their consumers' mean memory (a media
        # kind's declaration keeps more than the stage's CONSUMER_MEMORY_MB).
        "consumer_memory_mb": round(
            sum(config.queue_tuning(kind).memory_mb for kind in config.queue_names) / len(config.queue_names)
        )
        if config.queue_names
        else config.consumer_memory_mb,
    }


# --- AWS --------------------------------------------------------------------------------------


def estimate(
    workload: Workload,
    prices: PriceTable = DEFAULT_PRICES,
    model_prices: ModelPriceTable | None = None,
    profile: CallProfile | None = None,
) -> Estimate:
    """Price one month of `workload` on AWS, line by line, and the article's Cloudflare count.

    Per-path AWS calls come from `profile` (default: the committed, measured call profile). With
    `workload.model`, the model's lines come from `model_prices` (default: the table the consumer
    uses); a model that table does not price is a `ValueError`.
    """
    w = workload
    profile = profile or default_profile()
    runs, cron_runs_total, estimated_crons = month_runs(w, profile)
    ledger = Ledger(workload=w, prices=prices, runs=runs, cron_runs_total=cron_runs_total)
    sqs_lines(ledger)
    sqs_mapping_lines(ledger)
    lambda_lines(ledger)
    dynamodb_lines(ledger, profile.job_row_bytes)
    gateway_and_scheduler_lines(ledger)
    s3_and_sns_lines(ledger)
    unpriced = unpriced_calls(runs)
    if w.model is not None:
        for service, item, quantity, unit, unit_price, basis, how in _model_lines(w, model_prices):
            ledger.add(service, item, quantity, unit, unit_price, basis, how)

    operations = cloudflare_operations(w)
    measured_kinds = list(profile.measured_kinds)
    return Estimate(
        workload=w,
        prices=prices,
        lines=ledger.lines,
        cloudflare_operations=operations,
        cloudflare_usd=operations / MILLION * prices.cloudflare_queues_per_million_operations,
        model_rates=model_rates(w, model_prices),
        unpriced_calls=unpriced,
        measured_kinds=measured_kinds,
        estimated_kinds=[kind for kind in w.kinds if kind not in measured_kinds],
        estimated_crons=estimated_crons,
    )


def model_rates(w: Workload, table: ModelPriceTable | None = None) -> list[ModelRate]:
    """Every non-free model of every provider in the price table that the workload's usage prices,
    per 1M jobs (only succeeded jobs are billed)."""
    if not w.model_usage_per_job:
        return []
    succeeded = w.succeeded_jobs / w.jobs_per_month
    rates = []
    for entry in (table or default_table()).models:
        usd = None if entry.free else entry.price(w.model_usage_per_job, w.model_options)
        if usd is None:
            continue
        rates.append(
            ModelRate(
                provider=entry.provider,
                model=entry.model,
                usd_per_job=usd,
                usd_per_million_jobs=usd * succeeded * MILLION,
                as_of=entry.as_of,
            )
        )
    return sorted(rates, key=lambda rate: (rate.provider, rate.usd_per_million_jobs))


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
        f"AWS backbone per 1M jobs: ${estimate.per_million_jobs_usd:,.2f} at {w.jobs_per_month:,} jobs/month "
        f"(fixed costs spread over them), ${estimate.variable_per_million_jobs_usd:,.2f} variable"
    )
    out.append(floor_sentence(estimate))
    if estimate.model_rates:
        usage = ", ".join(f"{key}={value:g}" for key, value in w.model_usage_per_job.items())
        out.append(f"Model per 1M jobs ({usage} per succeeded job; list prices, verify them):")
        width = max(len(f"{r.provider} {r.model}") for r in estimate.model_rates)
        for rate in estimate.model_rates:
            name = f"{rate.provider} {rate.model}"
            out.append(
                f"  {name:<{width}}  ${rate.usd_per_million_jobs:>12,.2f}  (as of {rate.as_of.isoformat()})"
            )
    else:
        out.append(
            "Model per 1M jobs: give --model-usage (e.g. inputTokens=2000) to price every provider's models"
        )
    if estimate.unpriced_calls:
        calls = ", ".join(f"{name} x {count:,}" for name, count in estimate.unpriced_calls.items())
        out.append(f"Not priced (calls of the profile with no price in the table): {calls}")
    if notes := estimate.estimated_notes():
        out.append("Estimated, not measured (the call profile has not run them):")
        out.extend(f"  - {note}" for note in notes)
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
        "aws_per_million_jobs_usd": estimate.per_million_jobs_usd,
        "aws_variable_per_million_jobs_usd": estimate.variable_per_million_jobs_usd,
        "design_floor_per_million_jobs_usd": design_floor(
            estimate.workload, estimate.prices
        ).per_million_jobs_usd,
        "model_per_million_jobs": [rate.model_dump(mode="json") for rate in estimate.model_rates],
        "unpriced_calls": estimate.unpriced_calls,
        "measured_kinds": estimate.measured_kinds,
        "estimated": {
            "kinds": estimate.estimated_kinds,
            "crons": estimate.estimated_crons,
            "notes": estimate.estimated_notes(),
        },
        "cloudflare_operations": estimate.cloudflare_operations,
        "cloudflare_usd": estimate.cloudflare_usd,
        "assumptions": list(ASSUMPTIONS),
    }
