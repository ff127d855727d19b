"""The cost model (docs/design.md §8): the article's Cloudflare count, and AWS lines derived by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from aijobs_cdk import REPO_ROOT
from aijobs_cdk.stage import load_stage_config
from aijobs_cdk.stage_config import parse_stage_config
from aijobs_cli.sizing.call_profile import (
    CRON_DISPATCHER,
    Call,
    CallProfile,
    IndexWrite,
    ItemAccess,
    PathProfile,
    default_profile,
)
from aijobs_cli.sizing.cost import (
    DEFAULT_PRICES,
    Estimate,
    PriceTable,
    Workload,
    cloudflare_operations,
    cron_runs_per_hour,
    estimate,
    render_text,
    stage_workload,
    to_dict,
)
from aijobs_cli.sizing.cost_lines import poll_reads

ARTICLE = Workload(jobs_per_month=20_000, retry_rate=0.05, dlq_rate=0.01)
POLLS_PER_POLLER = 730 * 3600 // 20  # 131,400 twenty-second long polls in a 730-hour month

SEND = "SendMessage (submits, webhook deliveries, re-check re-sends)"
RECEIVE = "ReceiveMessage (consumer, with messages)"
DELETE = "DeleteMessageBatch (consumer acks)"
VISIBILITY = "ChangeMessageVisibility (retry back-off)"
DLQ_SEND = "SendMessage to DLQ"
DLQ_RECEIVE = "DLQ ReceiveMessage (DLQ consumer)"
DLQ_DELETE = "DLQ DeleteMessageBatch"
EMPTY_POLLS = "empty long polls (event-source mappings)"


def _sqs(est: Estimate, item: str) -> float:
    return est.quantity("SQS", item)


def _dynamo(
    operation: str, *, table: str = "shard", reads: float = 0, writes: float = 0, **kw: object
) -> Call:
    return Call.model_validate(
        {
            "service": "dynamodb",
            "operation": operation,
            "table": table,
            "read_units": reads,
            "write_units": writes,
        }
        | kw
    )


def _job_update(wru: float, index_units: float, size: int = 800) -> Call:
    """A job-row update that moves the row in both status indexes (2 writes each)."""
    moves = tuple(
        IndexWrite(index=index, partition="P", writes=2, bytes=size, units=index_units / 2)
        for index in ("by_user_status", "by_kind_status")
    )
    job = ItemAccess(
        action="Update",
        table="shard",
        partition="USER#{}",
        sort="JOB#{}",
        bytes=size,
        units=wru,
        index_writes=moves,
    )
    return _dynamo("UpdateItem", writes=wru, index_write_units=index_units, items=(job,))


SEND_CALL = Call(service="sqs", operation="SendMessage", table="queue", bytes=72)
PUT_CALL = Call(service="s3", operation="PutObject", bytes=160)


def _path(*calls: Call) -> PathProfile:
    return PathProfile(description="hand-made", calls=calls)


# A hand-made profile with round numbers, so every DynamoDB figure below can be checked by hand.
PROFILE = CallProfile(
    paths={
        "producer.submit": _path(
            _dynamo("Query", reads=1), _dynamo("TransactWriteItems", writes=8), SEND_CALL
        ),
        "producer.submit_idempotent": _path(
            _dynamo("Query", reads=1), _dynamo("TransactWriteItems", writes=10), SEND_CALL
        ),
        "producer.poll": _path(_dynamo("GetItem", reads=1)),
        "consumer.success": _path(_job_update(1, 4), PUT_CALL, _job_update(2, 6)),
        "consumer.retry": _path(
            _job_update(1, 4),
            _job_update(1, 4),
            Call(service="sqs", operation="ChangeMessageVisibility", table="queue"),
        ),
        "consumer.success_after_retry": _path(_job_update(1, 4), PUT_CALL, _job_update(2, 6)),
        "consumer.dead_letter": _path(
            _job_update(1, 4), Call(service="sqs", operation="SendMessage", table="dlq", bytes=72)
        ),
        "consumer.failed_final": _path(_job_update(1, 4), _dynamo("TransactWriteItems", writes=6)),
        "dlq.dead_letter": _path(
            _dynamo("GetItem", reads=1),
            _dynamo("PutItem", table="meta", writes=1, index_write_units=1),
            Call(service="sns", operation="Publish", bytes=512),
        ),
        "cron */10 * * * *": _path(
            _dynamo("PutItem", table="meta", writes=1),
            _dynamo("Query", index="by_due", partition="GRANT", reads=0.5),
            _dynamo("Query", index="by_kind_status", partition="KIND#{}#STATUS#{}", reads=0.5),
        ),
        # The dispatcher's own run (claim and finish): what a cron not measured yet is priced as.
        CRON_DISPATCHER: _path(
            _dynamo("PutItem", table="meta", writes=1), _dynamo("UpdateItem", table="meta", writes=2)
        ),
    },
    stage={"QUEUE_NAMES": "summary"},
)
ONE_CRON = {"*/10 * * * *": 6.0}


def _small(**overrides: object) -> Workload:
    """100 jobs, 10% retried, 2% dead-lettered after 3 retries, batches of 5, 1 KB messages."""
    fields: dict[str, object] = {"jobs_per_month": 100, "retry_rate": 0.10, "dlq_rate": 0.02}
    fields.update(overrides)
    return Workload.model_validate(fields)


# --- the article's example ----------------------------------------------------------------------


def test_article_example_is_exactly_61200_cloudflare_operations() -> None:
    # 20,000 * 3 (write, read, delete) + 1,000 retry reads + 200 DLQ writes
    assert cloudflare_operations(ARTICLE) == 61_200
    est = estimate(ARTICLE)
    assert est.cloudflare_operations == 61_200
    assert est.cloudflare_usd == pytest.approx(61_200 / 1_000_000 * 0.40)


def test_article_workload_on_aws_by_hand() -> None:
    est = estimate(ARTICLE)
    # 800 jobs retry once, 200 use all 3 retries: 1,400 re-deliveries, 21,400 deliveries.
    assert _sqs(est, SEND) == 20_000
    assert _sqs(est, RECEIVE) == 21_400 / 5
    assert _sqs(est, DELETE) == 20_000 / 5
    assert _sqs(est, VISIBILITY) == 800 + 200 * 3
    assert _sqs(est, DLQ_SEND) == 200
    assert _sqs(est, DLQ_RECEIVE) == _sqs(est, DLQ_DELETE) == 40
    assert _sqs(est, EMPTY_POLLS) == 5 * POLLS_PER_POLLER * 11  # 5 main queues + 5 DLQs + webhooks
    # One long-poll per job by default (GET /jobs/{id}?wait=), waiting 2 s in a 256 MB function.
    assert est.quantity("Lambda", "API (producer) invocations") == 20_000 + 20_000
    assert est.quantity("Lambda", "API long-poll waits") == pytest.approx(20_000 * 2.0 * 0.25)
    assert est.quantity("Lambda", "consumer duration") == pytest.approx(21_400 * 2.0 * 0.25)  # 256 MB
    assert est.quantity("API Gateway", "HTTP API requests") == 40_000
    # The default crons: the dev stage's */10 and */5.
    assert est.quantity("EventBridge Scheduler", "schedule invocations") == (6 + 12) * 730


def test_a_long_poll_is_billed_for_its_wait_and_webhooks_remove_both() -> None:
    short = estimate(_small(status_polls_per_job=3, poll_wait_seconds=0), profile=PROFILE)
    long = estimate(_small(status_polls_per_job=1, poll_wait_seconds=4), profile=PROFILE)
    hooked = estimate(_small(status_polls_per_job=0), profile=PROFILE)
    assert short.quantity("API Gateway", "HTTP API requests") == 100 + 300
    assert long.quantity("API Gateway", "HTTP API requests") == 100 + 100
    assert hooked.quantity("API Gateway", "HTTP API requests") == 100
    assert short.quantity("Lambda", "API long-poll waits") == 0
    assert long.quantity("Lambda", "API long-poll waits") == pytest.approx(100 * 4 * 256 / 1024)
    assert hooked.quantity("Lambda", "API long-poll waits") == 0
    # A poll reads the row at once, then after each pause it starts: 0.25, 0.5, 1, 2 s (then 2 s
    # again, the last one cut to the deadline) -- at 0, 0.25, 0.75, 1.75, 3.75 and 4 s in a 4 s wait.
    reads = hooked.quantity("DynamoDB", "read request units")
    assert long.quantity("DynamoDB", "read request units") == reads + 100 * 6
    assert short.quantity("DynamoDB", "read request units") == reads + 300 * 1


@pytest.mark.parametrize(("wait", "reads"), [(0, 1), (0.25, 2), (0.3, 3), (2, 5), (20, 14)])
def test_a_long_poll_reads_the_row_at_the_apis_pauses(wait: float, reads: int) -> None:
    assert poll_reads(wait) == reads


# --- 64 KB chunks -------------------------------------------------------------------------------


@pytest.mark.parametrize(("message_kb", "chunks"), [(1, 1), (64, 1), (64.5, 2), (100, 2), (128, 2), (129, 3)])
def test_cloudflare_operations_scale_with_64kb_chunks(message_kb: float, chunks: int) -> None:
    workload = _small(message_kb=message_kb)
    assert cloudflare_operations(workload) == chunks * (3 * 100 + 10 + 2)


def test_sqs_payload_requests_scale_with_64kb_chunks_but_acks_do_not() -> None:
    small = estimate(_small(retry_rate=0, dlq_rate=0, message_kb=1))
    large = estimate(_small(retry_rate=0, dlq_rate=0, message_kb=100))  # 2 chunks per message
    assert _sqs(small, SEND) == 100
    assert _sqs(large, SEND) == 200
    # 20 receive calls of 5 messages: 5 KB -> 1 request each; 500 KB -> ceil(500 / 64) = 8 each.
    assert _sqs(small, RECEIVE) == 20
    assert _sqs(large, RECEIVE) == 20 * 8
    # Deletes and empty polls carry receipt handles, not bodies.
    assert _sqs(large, DELETE) == _sqs(small, DELETE) == 20
    assert _sqs(large, EMPTY_POLLS) == _sqs(small, EMPTY_POLLS)


def test_dlq_send_is_billed_per_chunk() -> None:
    est = estimate(_small(message_kb=200))  # ceil(200 / 64) = 4 chunks
    assert _sqs(est, DLQ_SEND) == 2 * 4


# --- batching -----------------------------------------------------------------------------------


def test_batching_reduces_receive_delete_and_invocation_counts() -> None:
    one = estimate(_small(retry_rate=0, dlq_rate=0, batch_size=1))
    ten = estimate(_small(retry_rate=0, dlq_rate=0, batch_size=10))
    assert (_sqs(one, RECEIVE), _sqs(one, DELETE)) == (100, 100)
    assert (_sqs(ten, RECEIVE), _sqs(ten, DELETE)) == (10, 10)
    assert one.quantity("Lambda", "consumer invocations") == 100
    assert ten.quantity("Lambda", "consumer invocations") == 10
    # Sends are one per message whatever the batch size; so is the consumer's time.
    assert _sqs(one, SEND) == _sqs(ten, SEND) == 100
    assert one.quantity("Lambda", "consumer duration") == ten.quantity("Lambda", "consumer duration")
    assert one.aws_total_usd > ten.aws_total_usd


def test_receive_and_delete_calls_cap_at_ten_messages() -> None:
    est = estimate(_small(retry_rate=0, dlq_rate=0, batch_size=20))
    assert _sqs(est, RECEIVE) == 10  # ReceiveMessage returns at most 10 messages
    assert _sqs(est, DELETE) == 10  # DeleteMessageBatch takes at most 10 entries
    assert est.quantity("Lambda", "consumer invocations") == 5  # but one invocation gets 20


def test_partial_batches_round_up() -> None:
    est = estimate(_small(jobs_per_month=101, retry_rate=0, dlq_rate=0))
    assert _sqs(est, RECEIVE) == 21
    assert est.quantity("Lambda", "consumer invocations") == 21


# --- retries and the DLQ ------------------------------------------------------------------------


def test_retries_and_dlq_add_the_expected_requests() -> None:
    clean = estimate(_small(retry_rate=0, dlq_rate=0))
    failing = estimate(_small())
    # 10 retried jobs: 8 recover after 1 retry, 2 are dead-lettered after 3 retries.
    retries = 8 * 1 + 2 * 3
    deliveries = 100 + retries
    assert _sqs(failing, SEND) == _sqs(clean, SEND) == 100  # retries re-receive, never re-send
    assert _sqs(failing, RECEIVE) == math.ceil(deliveries / 5) == 23
    assert _sqs(clean, RECEIVE) == 20
    assert _sqs(failing, DELETE) == _sqs(clean, DELETE) == 20  # each message is deleted once
    assert _sqs(failing, VISIBILITY) == retries
    assert _sqs(clean, VISIBILITY) == 0
    assert _sqs(failing, DLQ_SEND) == 2
    assert (_sqs(failing, DLQ_RECEIVE), _sqs(failing, DLQ_DELETE)) == (1, 1)
    assert (_sqs(clean, DLQ_SEND), _sqs(clean, DLQ_RECEIVE), _sqs(clean, DLQ_DELETE)) == (0, 0, 0)

    assert failing.quantity("Lambda", "consumer invocations") == 23
    assert clean.quantity("Lambda", "consumer invocations") == 20
    assert failing.quantity("Lambda", "consumer duration") == pytest.approx(deliveries * 2.0 * 256 / 1024)
    assert clean.quantity("Lambda", "consumer duration") == pytest.approx(100 * 2.0 * 256 / 1024)
    assert failing.quantity("Lambda", "DLQ consumer invocations") == 1
    assert clean.quantity("Lambda", "DLQ consumer invocations") == 0
    # The measured job's result is small: on its row, no object. Only succeeded jobs write
    # objects, each of its artifacts one.
    assert failing.quantity("S3", "PUT requests") == 0
    assert estimate(_small(artifact_puts_per_job=1)).quantity("S3", "PUT requests") == 98
    assert failing.quantity("SNS", "Publish (alerts)") == 2  # one alert per dead-lettered job
    assert cloudflare_operations(failing.workload) - cloudflare_operations(clean.workload) == 10 + 2


def test_more_retries_make_dead_letters_costlier() -> None:
    three = estimate(_small(max_retries=3))
    five = estimate(_small(max_retries=5))
    assert _sqs(five, VISIBILITY) - _sqs(three, VISIBILITY) == 2 * (5 - 3)
    # The article's rough count gives a dead-lettered job one retry read, whatever max_retries is.
    assert five.cloudflare_operations == three.cloudflare_operations == 312


def test_provider_rechecks_are_re_sends() -> None:
    est = estimate(_small(retry_rate=0, dlq_rate=0, provider_rechecks_per_job=2))
    assert _sqs(est, SEND) == 100 + 200
    assert _sqs(est, RECEIVE) == 300 / 5
    assert _sqs(est, DELETE) == 300 / 5


# --- empty polls --------------------------------------------------------------------------------


@pytest.mark.parametrize(("pollers", "queues"), [(5, 5), (5, 1), (2, 3), (10, 7)])
def test_empty_polls_are_pollers_x_queues_x_long_polls(pollers: int, queues: int) -> None:
    est = estimate(_small(esm_pollers=pollers, queues=queues))
    # Each kind has a main queue and a DLQ, both with an event-source mapping.
    assert _sqs(est, EMPTY_POLLS) == pollers * POLLS_PER_POLLER * (2 * queues + 1)


def test_empty_polls_do_not_depend_on_traffic_and_dominate_a_quiet_month() -> None:
    quiet = estimate(_small(jobs_per_month=1, retry_rate=0, dlq_rate=0))
    busy = estimate(_small(jobs_per_month=1_000_000))
    assert _sqs(quiet, EMPTY_POLLS) == _sqs(busy, EMPTY_POLLS) == 7_227_000  # 5 x 131,400 x 11
    assert estimate(_small(esm_pollers=0)).quantity("SQS", EMPTY_POLLS) == 0
    quiet_sqs = quiet.by_service()["SQS"]
    assert quiet_sqs == pytest.approx(7_227_000 / 1_000_000 * 0.40, rel=1e-3)


# --- totals and prices --------------------------------------------------------------------------


def test_totals_equal_the_sum_of_lines() -> None:
    est = estimate(ARTICLE)
    by_hand = sum(line.quantity / line.price_basis * line.unit_price for line in est.lines)
    assert est.aws_total_usd == pytest.approx(by_hand)
    assert sum(est.by_service().values()) == pytest.approx(est.aws_total_usd)
    assert set(est.by_service()) == {
        "SQS",
        "Lambda",
        "DynamoDB",
        "API Gateway",
        "EventBridge Scheduler",
        "S3",
        "SNS",
    }
    for line in est.lines:
        assert line.monthly_usd == pytest.approx(line.quantity / line.price_basis * line.unit_price)


def test_price_table_round_trips_through_json(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(DEFAULT_PRICES.to_json(), encoding="utf-8")
    loaded = PriceTable.from_json(path)
    assert loaded == DEFAULT_PRICES
    assert json.loads(path.read_text())["as_of"] == DEFAULT_PRICES.as_of.isoformat()


def test_edited_sqs_price_changes_only_the_sqs_lines(tmp_path: Path) -> None:
    data = json.loads(DEFAULT_PRICES.to_json())
    data["sqs_standard_per_million_requests"] *= 2
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    edited = PriceTable.from_json(path)

    before, after = estimate(ARTICLE), estimate(ARTICLE, edited)
    assert after.by_service()["SQS"] == pytest.approx(2 * before.by_service()["SQS"])
    assert after.aws_total_usd - before.aws_total_usd == pytest.approx(before.by_service()["SQS"])
    assert after.by_service()["Lambda"] == pytest.approx(before.by_service()["Lambda"])


def test_scaling_every_aws_price_scales_the_total() -> None:
    scaled = DEFAULT_PRICES.model_copy(
        update={
            name: value * 3
            for name, value in DEFAULT_PRICES.model_dump().items()
            if isinstance(value, float) and not name.startswith("cloudflare")
        }
    )
    assert estimate(ARTICLE, scaled).aws_total_usd == pytest.approx(3 * estimate(ARTICLE).aws_total_usd)
    assert estimate(ARTICLE, scaled).cloudflare_usd == pytest.approx(estimate(ARTICLE).cloudflare_usd)


def test_price_table_rejects_typos_and_negative_prices(tmp_path: Path) -> None:
    data = json.loads(DEFAULT_PRICES.to_json())
    data["sqs_per_milion"] = 0.5
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValidationError):
        PriceTable.from_json(path)
    with pytest.raises(ValidationError):
        DEFAULT_PRICES.model_validate({**DEFAULT_PRICES.model_dump(), "s3_put_per_thousand": -1})


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"jobs_per_month": 0},
        {"jobs_per_month": -5},
        {"jobs_per_month": 100, "retry_rate": 1.5},
        {"jobs_per_month": 100, "retry_rate": -0.1},
        {"jobs_per_month": 100, "retry_rate": 0.1, "dlq_rate": 1.2},
        # A job reaches the DLQ only after failing its first attempt: dead letters are retried jobs.
        {"jobs_per_month": 100, "retry_rate": 0.01, "dlq_rate": 0.05},
        {"jobs_per_month": 100, "max_retries": -1},
        {"jobs_per_month": 100, "retry_rate": 0.5, "failed_final_rate": 0.6},
        {"jobs_per_month": 100, "cron_runs": {"*/5 * * * *": -1}},
        {"jobs_per_month": 100, "shard_count": 0},
        {"jobs_per_month": 100, "job_row_kb": 500},
        {"jobs_per_month": 100, "message_kb": 0},
        {"jobs_per_month": 100, "message_kb": 2048},
        {"jobs_per_month": 100, "batch_size": 0},
        {"jobs_per_month": 100, "queues": 0},
        {"jobs_per_month": 100, "esm_pollers": -1},
        {"jobs_per_month": 100, "retries_rate": 0.1},  # a typo is an error, not a silent default
    ],
)
def test_invalid_workloads_are_rejected(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Workload.model_validate(fields)


def test_dlq_rate_equal_to_retry_rate_is_allowed() -> None:
    workload = Workload(jobs_per_month=100, retry_rate=0.05, dlq_rate=0.05)
    assert workload.recovered_jobs == 0
    assert workload.retries == 5 * 3


# --- output -------------------------------------------------------------------------------------


def test_render_text_shows_every_line_its_derivation_and_the_totals() -> None:
    est = estimate(ARTICLE)
    text = render_text(est)
    for line in est.lines:
        assert line.item in text
        assert line.how in text
    assert "61,200 operations" in text
    assert f"{est.aws_total_usd:.4f}" in text
    assert "7,227,000" in text
    assert "e-0" not in text  # prices without exponent notation


def test_to_dict_is_json_ready_and_consistent() -> None:
    est = estimate(ARTICLE)
    data = json.loads(json.dumps(to_dict(est)))
    assert data["cloudflare_operations"] == 61_200
    assert data["aws_total_usd"] == pytest.approx(sum(line["monthly_usd"] for line in data["lines"]))
    assert len(data["lines"]) == len(est.lines)
    assert data["prices"]["as_of"] == DEFAULT_PRICES.as_of.isoformat()
    assert data["workload"]["jobs_per_month"] == 20_000
    assert data["assumptions"]


def test_cli_prices_a_models_spend_from_the_model_price_table() -> None:
    import json as _json

    from typer.testing import CliRunner

    from aijobs.pricing import cost as job_cost
    from aijobs_cli.main import app

    args = ["cost", "--jobs", "1000", "--retry-rate", "0", "--dlq-rate", "0", "--json"]
    usage = ["--model-usage", "inputTokens=2000", "--model-usage", "outputTokens=300"]
    result = CliRunner().invoke(app, [*args, "--model", "us.amazon.nova-lite-v1:0", *usage])
    assert result.exit_code == 0, result.output
    document = _json.loads(result.stdout)
    per_job = job_cost("bedrock", "us.amazon.nova-lite-v1:0", {"inputTokens": 2000, "outputTokens": 300})
    assert per_job is not None
    model_usd = sum(line["monthly_usd"] for line in document["lines"] if line["service"] == "Model")
    assert abs(model_usd - per_job * 1000) < 1e-6
    refused = CliRunner().invoke(app, [*args, "--model", "no-such-model"])
    assert refused.exit_code != 0
    assert "not in the model price" in refused.output
    bad = CliRunner().invoke(app, [*args, "--model", "us.amazon.nova-lite-v1:0", "--model-usage", "tokens"])
    assert bad.exit_code != 0
    assert "UNIT=NUMBER" in bad.output


# --- per path, from the call profile ----------------------------------------------------------------


def test_dynamodb_units_are_each_paths_measured_units_times_its_runs() -> None:
    w = _small(
        cron_runs={},
        failed_final_rate=0.05,
        idempotency_key_rate=0.2,
        status_polls_per_job=2,
        poll_wait_seconds=0,
    )
    est = estimate(w, profile=PROFILE)
    # 100 jobs: 20 keyed submits; 10 retried (8 recover, 2 dead-lettered after 3 retries); 5 fail for good.
    first_try, recovered, dead, final, retries = 100 - 10 - 5, 8, 2, 5, 8 + 2 * 3
    writes = (
        80 * 8 + 20 * 10  # submits: the transaction
        + first_try * 13 + recovered * 13  # successes: claim (1 + 4 index) + finish (2 + 6 index)
        + retries * 10 + dead * 5 + final * 11  # failed attempts
        + dead * 2  # DLQ consumer: the dead-letter record and its index entry
    )  # fmt: skip
    assert est.quantity("DynamoDB", "write request units") == writes
    assert est.quantity("DynamoDB", "read request units") == 100 * 1 + 200 * 1 + dead * 1
    assert est.quantity("DynamoDB", "write request units (crons)") == 0
    assert _sqs(est, SEND) == 100
    assert _sqs(est, VISIBILITY) == retries
    assert _sqs(est, DLQ_SEND) == dead
    assert est.quantity("S3", "PUT requests") == first_try + recovered
    assert est.quantity("SNS", "Publish (alerts)") == dead


def test_cron_calls_repeat_per_run_per_shard_and_per_kind() -> None:
    one = estimate(_small(cron_runs=ONE_CRON, queues=1, shard_count=1), profile=PROFILE)
    many = estimate(_small(cron_runs=ONE_CRON, queues=4, shard_count=3), profile=PROFILE)
    runs = 6 * 730
    assert one.quantity("DynamoDB", "write request units (crons)") == runs * 1  # meta: once per run
    assert one.quantity("DynamoDB", "read request units (crons)") == runs * (0.5 + 0.5)
    # The GRANT query repeats per shard, the KIND#/STATUS# one per shard and kind.
    assert many.quantity("DynamoDB", "read request units (crons)") == runs * (3 * 0.5 + 3 * 4 * 0.5)
    assert many.quantity("Lambda", "cron dispatcher invocations") == runs
    assert many.quantity("EventBridge Scheduler", "schedule invocations") == runs


def test_a_cron_the_profile_has_not_measured_is_priced_as_the_dispatchers_run_and_listed() -> None:
    est = estimate(_small(cron_runs={"*/10 * * * *": 6.0, "0 3 * * *": 1 / 24}), profile=PROFILE)
    measured_runs, estimated_runs = 6 * 730, round(730 / 24)
    assert est.estimated_crons == ["0 3 * * *"]
    # */10 as measured (1 WRU once per run), 0 3 as the dispatcher's claim and finish (1 + 2 WRU).
    assert est.quantity("DynamoDB", "write request units (crons)") == measured_runs * 1 + estimated_runs * 3
    assert est.quantity("Lambda", "cron dispatcher invocations") == measured_runs + estimated_runs
    assert est.quantity("EventBridge Scheduler", "schedule invocations") == measured_runs + estimated_runs
    text = render_text(est)
    assert "Estimated, not measured" in text
    (note,) = [line for line in text.splitlines() if "'0 3 * * *'" in line and "dispatcher run" in line]
    assert "--write-profile" in note
    assert to_dict(est)["estimated"]["crons"] == ["0 3 * * *"]
    measured = estimate(_small(cron_runs=ONE_CRON), profile=PROFILE)
    assert (measured.estimated_crons, measured.estimated_notes()) == ([], [])
    assert "Estimated, not measured" not in render_text(measured)


def test_a_profile_without_the_dispatchers_run_says_how_to_regenerate_it() -> None:
    old = PROFILE.model_copy(
        update={"paths": {n: p for n, p in PROFILE.paths.items() if n != CRON_DISPATCHER}}
    )
    with pytest.raises(KeyError, match="--write-profile"):
        estimate(_small(cron_runs={"0 3 * * *": 1 / 24}), profile=old)


def test_kinds_the_profile_has_not_measured_are_priced_like_its_kind_and_listed() -> None:
    kinds = ("summary", "translate", "report")
    est = estimate(_small(queues=3, kinds=kinds, cron_runs=ONE_CRON), profile=PROFILE)
    unnamed = estimate(_small(queues=3, cron_runs=ONE_CRON), profile=PROFILE)
    assert est.lines == unnamed.lines  # the same figures: every kind is priced as the measured one
    assert (est.measured_kinds, est.estimated_kinds) == (["summary"], ["translate", "report"])
    (note,) = [line for line in render_text(est).splitlines() if "translate" in line]
    assert "kinds translate, report" in note
    assert "summary" in note
    assert to_dict(est)["estimated"]["kinds"] == ["translate", "report"]
    with pytest.raises(ValidationError, match="kinds"):
        _small(queues=2, kinds=kinds)


@pytest.mark.parametrize(
    ("expression", "per_hour"),
    [
        ("*/10 * * * *", 6),
        ("*/5 * * * *", 12),
        ("* * * * *", 60),
        ("0 3 * * *", 1 / 24),
        ("0,30 9-17 * * *", 18 / 24),
        ("0 0 * * 1", 208 / 1461 / 24),  # the 208 Mondays of 2025-2028
        ("0 0 1 * *", 48 / 1461 / 24),  # the 1st of each month, over 4 years of days
        ("0 0 29 2 *", 1 / 1461 / 24),  # leap days only
    ],
)
def test_cron_runs_per_hour_average_the_firings_over_the_calendar(expression: str, per_hour: float) -> None:
    assert cron_runs_per_hour(expression) == pytest.approx(per_hour, rel=1e-9)


def test_the_stage_decides_crons_shards_kinds_and_retries() -> None:
    config = parse_stage_config(
        "t",
        {
            "QUEUE_NAMES": "summary;embedding;tts-generate",
            "CRONS": "*/10 * * * *;0 3 * * *",
            "SHARD_COUNT": "4",
            "MAX_RETRIES": "2",
            "BATCH_SIZE": "7",
            "PROVIDER": "local",
        },
    )
    fields = stage_workload(config)
    assert fields["cron_runs"] == {"*/10 * * * *": 6.0, "0 3 * * *": pytest.approx(1 / 24)}
    assert fields["kinds"] == ("summary", "embedding", "tts-generate")
    assert (fields["shard_count"], fields["queues"], fields["max_retries"], fields["batch_size"]) == (
        4,
        3,
        2,
        7,
    )
    # The kinds' mean memory: summary and embedding at CONSUMER_MEMORY_MB, tts-generate its own 512.
    assert fields["consumer_memory_mb"] == round((256 + 256 + 512) / 3) == 341


def test_a_stage_without_kinds_prices_its_consumers_at_the_stage_memory() -> None:
    config = parse_stage_config("t", {"QUEUE_NAMES": "", "PROVIDER": "local", "CONSUMER_MEMORY_MB": "384"})
    assert stage_workload(config)["consumer_memory_mb"] == 384


def test_a_larger_job_row_costs_more_units_on_job_rows_only() -> None:
    w = _small(retry_rate=0, dlq_rate=0, cron_runs={})
    measured = estimate(w, profile=PROFILE)
    large = estimate(w.model_copy(update={"job_row_kb": 2.5}), profile=PROFILE)
    assert measured.quantity("DynamoDB", "write request units") == 100 * 8 + 100 * 13
    # Each success updates its job row twice: 3 WRU at 2.5 KB, and 2 x 3 in each of its 2 indexes.
    # The submit's transaction (no job item in this hand-made profile) keeps its 8.
    assert large.quantity("DynamoDB", "write request units") == 100 * 8 + 100 * 2 * (3 + 2 * 2 * 3)
    assert large.quantity("DynamoDB", "read request units") == measured.quantity(
        "DynamoDB", "read request units"
    )


def test_per_million_jobs_spreads_fixed_costs_and_variable_leaves_them_out() -> None:
    small, large = estimate(_small(jobs_per_month=10_000)), estimate(_small(jobs_per_month=1_000_000))
    assert small.per_million_jobs_usd > large.per_million_jobs_usd  # the empty polls weigh less
    assert small.variable_per_million_jobs_usd == pytest.approx(large.variable_per_million_jobs_usd, rel=0.02)
    fixed = sum(line.monthly_usd for line in small.lines if line.fixed)
    assert small.per_million_jobs_usd == pytest.approx(small.aws_total_usd / 10_000 * 1_000_000)
    assert small.variable_per_million_jobs_usd == pytest.approx(
        (small.aws_total_usd - fixed) / 10_000 * 1_000_000
    )
    assert {line.item for line in small.lines if line.fixed} >= {EMPTY_POLLS, "schedule invocations"}


def test_model_rates_price_every_providers_models_for_the_usage() -> None:
    from aijobs.pricing import default_table

    est = estimate(_small(model_usage_per_job={"inputTokens": 2000, "outputTokens": 300}))
    rates = {(r.provider, r.model): r for r in est.model_rates}
    assert {provider for provider, _ in rates} == {"bedrock", "openai"}  # polly bills characters
    lite = rates[("bedrock", "amazon.nova-lite-v1:0")]
    entry = default_table().lookup("bedrock", "amazon.nova-lite-v1:0")
    assert entry is not None
    per_job = entry.price({"inputTokens": 2000, "outputTokens": 300})
    assert per_job is not None
    assert lite.usd_per_million_jobs == pytest.approx(per_job * 0.98 * 1_000_000)  # 2% dead-lettered
    assert ("local", "local") not in rates  # free models are not listed
    speech = estimate(_small(model_usage_per_job={"characters": 1000}))
    assert {r.provider for r in speech.model_rates} == {"polly"}
    text = render_text(est)
    assert "Model per 1M jobs" in text
    assert "bedrock amazon.nova-lite-v1:0" in text
    assert f"{lite.usd_per_million_jobs:,.2f}" in text
    assert estimate(_small()).model_rates == []


def test_cli_reads_the_stage_and_the_profile_and_says_what_is_missing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from aijobs_cli.main import app

    missing = CliRunner().invoke(app, ["cost", "--stage", "nosuchstage"])
    assert missing.exit_code != 0
    assert ".env.nosuchstage" in missing.output
    # The dev stage's crons are not all in this hand-made profile: figures all the same, the crons
    # it lacks priced as the dispatcher's run and named.
    profile = tmp_path / "profile.json"
    profile.write_text(PROFILE.to_json(), encoding="utf-8")
    partial = CliRunner().invoke(app, ["cost", "--stage", "dev", "--call-profile", str(profile), "--json"])
    assert partial.exit_code == 0, partial.output
    dev_crons = [cron.text for cron in load_stage_config("dev").crons]
    assert json.loads(partial.stdout)["estimated"]["crons"] == [c for c in dev_crons if c != "*/10 * * * *"]
    # A profile written before the dispatcher's run was measured: name the command that measures it.
    old = PROFILE.model_copy(
        update={"paths": {n: p for n, p in PROFILE.paths.items() if n != CRON_DISPATCHER}}
    )
    profile.write_text(old.to_json(), encoding="utf-8")
    stale = CliRunner().invoke(app, ["cost", "--stage", "dev", "--call-profile", str(profile)])
    assert stale.exit_code != 0
    assert "--write-profile" in stale.output
    ok = CliRunner().invoke(app, ["cost", "--stage", "dev", "--jobs", "1000000", "--json"])
    assert ok.exit_code == 0, ok.output
    document = json.loads(ok.stdout)
    assert document["aws_per_million_jobs_usd"] == pytest.approx(document["aws_total_usd"])


def test_a_stage_with_a_kind_and_a_cron_of_its_own_gets_figures_saying_what_was_estimated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a team does (docs/how-to/add-a-kind.md, "Adding a cron job"): a kind declared and a cron
    registered, both in its stage file, and nothing else; `aijobs cost` and `aijobs capacity` answer."""
    from dataclasses import replace

    from typer.testing import CliRunner

    from aijobs.consumer import registry as queues
    from aijobs.kinds import registry as kinds
    from aijobs.scheduled import registry as crons
    from aijobs_cdk import stage as stage_module
    from aijobs_cli.main import app

    kind = next(name for n in range(100) if (name := f"team-kind{n}") not in queues.QUEUE_HANDLERS)
    cron = next(text for n in range(60) if (text := f"{n} 3 * * *") not in crons.SCHEDULED_HANDLERS)
    # A kind of the team's own: its declaration (as aijobs/kinds/<kind>.py would hold it).
    declared, real = replace(kinds.require("summary"), name=kind), kinds.kind
    monkeypatch.setattr(kinds, "kind", lambda name: declared if name == kind else real(name))
    monkeypatch.setitem(crons.SCHEDULED_HANDLERS, cron, lambda _run, _ctx: {})
    lines = []
    for line in (REPO_ROOT / ".env.dev").read_text().splitlines():
        key, _, value = line.partition("=")
        if key in ("QUEUE_NAMES", "CRONS"):
            line = f"{key}={value};{kind if key == 'QUEUE_NAMES' else cron}"
        lines.append(line)
    (tmp_path / ".env.team").write_text("\n".join(lines) + "\n")
    load = stage_module.load_stage_config
    monkeypatch.setattr(
        stage_module, "load_stage_config", lambda name, context=None: load(name, context, env_dir=tmp_path)
    )

    result = CliRunner().invoke(app, ["cost", "--stage", "team", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["aws_total_usd"] > 0
    assert kind in document["estimated"]["kinds"]
    assert "summary" not in document["estimated"]["kinds"]  # measured
    # The crons the committed profile measured are priced as measured; the new one is estimated.
    crons_of_stage = [c.text for c in load_stage_config("dev").crons] + [cron]
    assert document["estimated"]["crons"] == [c for c in crons_of_stage if not default_profile().has_cron(c)]
    assert cron in document["estimated"]["crons"]
    assert document["workload"]["queues"] == len(load_stage_config("dev").queue_names) + 1
    rendered = CliRunner().invoke(app, ["cost", "--stage", "team"])
    assert rendered.exit_code == 0, rendered.output
    assert kind in rendered.output
    assert repr(cron) in rendered.output

    capacity = CliRunner().invoke(app, ["capacity", "--jobs-per-second", "10", "--stage", "team", "--json"])
    assert capacity.exit_code == 0, capacity.output
    report = json.loads(capacity.stdout)
    assert kind in report["inputs"]["kinds"]
    assert [note for note in report["notes"] if cron in note], report["notes"]


def test_webhooks_are_priced_from_their_measured_paths() -> None:
    profile = default_profile()
    plain = estimate(_small(status_polls_per_job=0), profile=profile)
    hooked = estimate(
        _small(status_polls_per_job=0, webhook_rate=0.5, webhook_post_seconds=0.4), profile=profile
    )
    # 100 jobs, 90 first-try successes (10 retried): 45 of those queue their delivery on success;
    # 50 deliveries in all (one per finished job that named a URL).
    first_try = plain.workload.first_try_jobs
    assert first_try == 90
    sends = [c for c in profile.path("consumer.success_webhook").calls if c.operation == "SendMessage"]
    assert len(sends) == 1
    assert _sqs(hooked, SEND) == _sqs(plain, SEND) + 45
    assert hooked.quantity("Lambda", "webhook consumer") == 50 / 5
    assert hooked.quantity("Lambda", "webhook consumer duration") == pytest.approx(50 * 0.4 * 256 / 1024)
    assert _sqs(hooked, "webhook ReceiveMessage + DeleteMessageBatch (webhook consumer)") == 10 + 10
    _, success = profile.path("consumer.success").units()
    _, success_hooked = profile.path("consumer.success_webhook").units()
    delivery_reads, delivery_writes = profile.path("webhook.delivery").units()
    assert delivery_writes > 0
    assert delivery_reads > 0
    assert hooked.quantity("DynamoDB", "write request units") == pytest.approx(
        plain.quantity("DynamoDB", "write request units")
        + 45 * (success_hooked - success)
        + 50 * delivery_writes
    )
    assert hooked.quantity("DynamoDB", "read request units") == pytest.approx(
        plain.quantity("DynamoDB", "read request units") + 50 * delivery_reads
    )
    # No webhook: no webhook lines at all, and a profile without the webhook paths still prices.
    assert not [line for line in plain.lines if "webhook consumer" in line.item]
    assert estimate(_small(), profile=PROFILE).quantity("API Gateway", "HTTP API requests") == 200
