"""The soak as a paced load test with hard caps (`aijobs soak --rate --max-jobs --max-spend-usd`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from aijobs.observability import logger
from aijobs_cli.main import app
from aijobs_cli.soak.load import LoadPlan, Pacer, counted_spend, fetch_metrics, throttle_queries
from aijobs_cli.soak.run import run_soak
from aijobs_cli.soak.targets import LocalSoakTarget
from aijobs_cli.soak.workload import FAULTS, SoakJob
from aijobs_cli.target import Target
from tests.integration.harness import restored_process_state

pytestmark = pytest.mark.integration


class FakeTime:
    """A clock that only moves when slept on, recording every sleep."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_pacer_spaces_slots_by_one_over_the_rate_and_never_sleeps_when_late() -> None:
    fake = FakeTime()
    pacer = Pacer(4.0, fake.clock, fake.sleep)
    for slot in range(3):
        pacer.wait(slot)
    assert fake.sleeps == [0.25, 0.25]
    fake.now += 10  # a slow submit: the next slots are already due
    pacer.wait(3)
    assert fake.sleeps == [0.25, 0.25]


def test_the_caps() -> None:
    plan = LoadPlan(max_jobs=10, max_spend_usd=1.0, cost_per_job_usd=0.25, duration_seconds=60)
    assert plan.stop_reason(submitted=3, spend=0.75, elapsed=1) is None
    assert plan.stop_reason(submitted=4, spend=1.0, elapsed=1) == "max_spend"  # a fifth would pass 1.0
    assert plan.stop_reason(submitted=10, spend=0, elapsed=1) == "max_jobs"
    assert plan.stop_reason(submitted=1, spend=0, elapsed=60) == "duration"
    job = SoakJob(index=0, user_id="u", kind="summary", fault=FAULTS[0], price=1)
    dear = SoakJob(index=1, user_id="u", kind="summary", fault=FAULTS[0], price=1, cost=0.4)
    cheap = SoakJob(index=2, user_id="u", kind="summary", fault=FAULTS[0], price=1, cost=0.01)
    # Each job counts at the larger of the bound and its recorded cost: the count never goes down.
    assert counted_spend([job, dear, cheap], 0.25) == pytest.approx(0.25 + 0.4 + 0.25)


STACK = Target(
    stage="prod",
    region="us-east-1",
    meta_table="aijobs-prod-meta",
    shard_tables=["aijobs-prod-shard-0"],
    queue_urls={"summary": "https://sqs.us-east-1.amazonaws.com/123456789012/aijobs-prod-summary"},
    dlq_urls={"summary": "https://sqs.us-east-1.amazonaws.com/123456789012/aijobs-prod-summary-dlq"},
    consumer_functions={"summary": "aijobs-prod-consumer-summary"},
    cron_function="aijobs-prod-cron",
)


def _query(
    number: int, namespace: str, metric: str, stat: str, dims: list[dict[str, str]], what: str
) -> dict:  # type: ignore[type-arg]
    return {
        "Id": f"m{number}",
        "Label": f"{namespace.removeprefix('AWS/')} {metric} {stat} {what}",
        "MetricStat": {
            "Metric": {"Namespace": namespace, "MetricName": metric, "Dimensions": dims},
            "Period": 60,
            "Stat": stat,
        },
        "ReturnData": True,
    }


def test_the_cloudwatch_queries_cover_functions_tables_indexes_and_queues() -> None:
    queries = throttle_queries(STACK)
    table = [{"Name": "TableName", "Value": "aijobs-prod-shard-0"}]
    assert (
        _query(
            0,
            "AWS/Lambda",
            "Throttles",
            "Sum",
            [{"Name": "FunctionName", "Value": "aijobs-prod-consumer-summary"}],
            "aijobs-prod-consumer-summary",
        )
        in queries
    )
    assert (
        _query(
            1,
            "AWS/Lambda",
            "Throttles",
            "Sum",
            [{"Name": "FunctionName", "Value": "aijobs-prod-cron"}],
            "aijobs-prod-cron",
        )
        in queries
    )
    labels = {query["Label"] for query in queries}
    assert "Lambda ConcurrentExecutions Maximum account" in labels
    assert "DynamoDB WriteThrottleEvents Sum aijobs-prod-shard-0" in labels
    assert "DynamoDB ReadThrottleEvents Sum aijobs-prod-meta" in labels
    # Every index the call profile writes, on the table role it writes it on.
    for index in ("by_kind_status", "by_user_status", "by_due"):
        dims = [*table, {"Name": "GlobalSecondaryIndexName", "Value": index}]
        assert any(query["MetricStat"]["Metric"]["Dimensions"] == dims for query in queries), index
    assert "DynamoDB WriteThrottleEvents Sum aijobs-prod-meta/by_time" in labels
    assert "SQS ApproximateNumberOfMessagesNotVisible Maximum aijobs-prod-summary" in labels
    assert "SQS ApproximateAgeOfOldestMessage Maximum aijobs-prod-summary-dlq" in labels
    assert len({query["Id"] for query in queries}) == len(queries)


def test_the_metrics_are_read_page_by_page_and_summed_or_maxed() -> None:
    queries = throttle_queries(STACK)[:2] + [
        q for q in throttle_queries(STACK) if q["Label"] == "Lambda ConcurrentExecutions Maximum account"
    ]
    start = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    end = start + timedelta(minutes=10)
    client = boto3.client(
        "cloudwatch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    asked = {"MetricDataQueries": queries, "StartTime": start, "EndTime": end, "ScanBy": "TimestampAscending"}
    peak = queries[2]["Id"]
    with Stubber(client) as stub:
        stub.add_response(
            "get_metric_data",
            {
                "MetricDataResults": [
                    {"Id": "m0", "Values": [3.0, 4.0], "StatusCode": "PartialData"},
                    {"Id": peak, "Values": [120.0], "StatusCode": "PartialData"},
                ],
                "NextToken": "page-2",
            },
            asked,
        )
        stub.add_response(
            "get_metric_data",
            {
                "MetricDataResults": [
                    {"Id": "m0", "Values": [1.0], "StatusCode": "Complete"},
                    {"Id": peak, "Values": [80.0], "StatusCode": "Complete"},
                ]
            },
            {**asked, "NextToken": "page-2"},
        )
        values = fetch_metrics(client, queries, start, end)
        stub.assert_no_pending_responses()
    assert values == {
        "Lambda Throttles Sum aijobs-prod-consumer-summary": 8.0,
        "Lambda Throttles Sum aijobs-prod-cron": 0.0,
        "Lambda ConcurrentExecutions Maximum account": 120.0,
    }


def test_a_deployed_soak_refuses_to_start_without_both_caps() -> None:
    runner = CliRunner()
    base = ["soak", "--api-url", "https://api.invalid", "--api-key", "k"]
    for extra in ([], ["--max-jobs", "10"], ["--max-spend-usd", "5"]):
        result = runner.invoke(app, base + extra)
        assert result.exit_code == 1, result.output
        assert "--max-jobs N and --max-spend-usd USD" in " ".join(result.output.split())


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    with restored_process_state():
        logger.setLevel("WARNING")
        os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
        yield


def test_a_paced_run_on_the_local_stack_stops_at_the_spend_cap(quiet_logs: None) -> None:
    fake = FakeTime()
    # 0.1 USD counted per job against 0.35: the fourth job would pass the cap, whatever the rows say.
    load = LoadPlan(max_jobs=6, max_spend_usd=0.35, cost_per_job_usd=0.1, rate=2.0, duration_seconds=600)
    with LocalSoakTarget({"CONSUMER_TIMEOUT_SECONDS": "3"}) as target:
        report = run_soak(
            target, jobs=50, users=1, seed=7, timeout_seconds=300, load=load,
            capacity_inputs={"api_throttle_rate": 50}, clock=fake.clock, sleep=fake.sleep,
        )  # fmt: skip
    assert report.load is not None
    assert (report.load["stopped_by"], report.load["submitted"], report.jobs) == ("max_spend", 3, 3)
    # Slots at 0, 0.5 and 1.0 s; the fourth slot was waited for, then refused by the cap.
    assert fake.sleeps == [0.5, 0.5, 0.5]
    assert report.load["spend_counted_usd"] == pytest.approx(0.3)
    assert report.load["spend_recorded_usd"] == 0  # the local provider's models cost nothing
    start, end = (datetime.fromisoformat(moment) for moment in report.load["window"])
    assert start < end
    throttles = report.load["throttles"]
    assert throttles["api_429"] == 0
    assert throttles["cloudwatch"] is None  # the local stack has no CloudWatch metrics
    # The plan's first three faults: plain, transient 503 x2, throttled 429 x1.
    assert throttles["job_error_classes"] == {"transient": 1, "throttled": 1}
    assert throttles["job_error_classes_of_faultless_jobs"] == {}
    prediction = report.load["prediction"]
    assert prediction["jobs_per_second"] == 2.0
    assert prediction["limits_reached"] == []
    assert prediction["first_wall"]["limit"] == "API stage throttle (API_THROTTLE_RATE)"
    # 50 requests/s over a submit and one status call (the capacity model's default) per job.
    assert prediction["first_wall"]["jobs_per_second"] == pytest.approx(25.0)
    assert report.ok, report.examples
