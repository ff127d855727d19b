"""The capacity model (`aijobs capacity`): loads and walls derived by hand from a small profile."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from aijobs_cli.call_profile import Call, CallProfile, IndexWrite, ItemAccess, PathProfile
from aijobs_cli.capacity import (
    CapacityInputs,
    backoff_seconds_per_job,
    deliveries_per_job,
    model,
    partition_scope,
    path_rates,
)
from aijobs_cli.cost import Workload, _path_counts
from aijobs_cli.main import app


def _index(index: str, partition: str, units: float) -> IndexWrite:
    return IndexWrite(index=index, partition=partition, writes=1, bytes=500, units=units)


def _item(sort: str, units: float, *index_writes: IndexWrite) -> ItemAccess:
    return ItemAccess(
        action="Put", table="shard", partition="USER#{}", sort=sort, bytes=500, changed=True, units=units,
        index_writes=index_writes,
    )  # fmt: skip


def _write(*items: ItemAccess) -> Call:
    return Call(
        service="dynamodb",
        operation="TransactWriteItems",
        table="shard",
        transactional=True,
        write_units=sum(item.units for item in items),
        index_write_units=sum(entry.units for item in items for entry in item.index_writes),
        items=items,
    )


# Round numbers: a submit writes the job row (2 WRU, 1 in each status index), the tenant's CREDITS
# (2), a grant (2, 1 in GRANT) and a transaction (2, 1 in TX); a success updates the job row (1 WRU,
# 2 in the kind/status index). Nothing fails, nobody polls.
PROFILE = CallProfile(
    paths={
        "producer.submit": PathProfile(
            description="submit",
            calls=(
                _write(
                    _item(
                        "JOB#{}",
                        2,
                        _index("by_kind_status", "KIND#{}#STATUS#{}", 1),
                        _index("by_user_status", "USER#{}#STATUS#{}", 1),
                    ),
                    _item("CREDITS", 2),
                    _item("GRANT#{}", 2, _index("by_due", "GRANT", 1)),
                    _item("TX#{}", 2, _index("by_due", "TX", 1)),
                ),
                Call(service="sqs", operation="SendMessage", table="queue", bytes=72),
            ),
        ),
        "consumer.success": PathProfile(
            description="success",
            calls=(_write(_item("JOB#{}", 1, _index("by_kind_status", "KIND#{}#STATUS#{}", 2))),),
        ),
    }
)

INPUTS = CapacityInputs(
    jobs_per_second=1000,
    kinds=("summary", "embedding"),
    tenants=10,
    retry_rate=0,
    dlq_rate=0,
    polls_per_job=0,
    consumer_seconds=2.0,
    batch_window_seconds=10,
    api_throttle_rate=50,
    index_buckets=4,
)


def _limit(name: str, inputs: CapacityInputs = INPUTS) -> tuple[float, float, float]:
    report = model(inputs, PROFILE)
    (found,) = [limit for limit in report.limits if limit.name == name]
    return found.load(inputs.jobs_per_second), found.ceiling, found.wall


def test_path_rates_are_the_cost_models_job_fates_per_job() -> None:
    inputs = CapacityInputs(
        jobs_per_second=1, kinds=("a",), retry_rate=0.05, dlq_rate=0.01, failed_final_rate=0.02,
        idempotency_rate=0.3, polls_per_job=3, max_retries=3,
    )  # fmt: skip
    jobs = 1_000_000
    counts = _path_counts(
        Workload(
            jobs_per_month=jobs, retry_rate=0.05, dlq_rate=0.01, failed_final_rate=0.02,
            idempotency_key_rate=0.3, status_polls_per_job=3, max_retries=3,
        )
    )  # fmt: skip
    assert path_rates(inputs) == pytest.approx({name: count / jobs for name, count in counts.items()})
    # 1 first attempt + 0.04 recovered retries + 0.01 x 3 retries of the dead-lettered.
    assert deliveries_per_job(inputs) == pytest.approx(1.07)


def test_backoff_is_equal_jitter_on_doubling_steps() -> None:
    inputs = CapacityInputs(
        jobs_per_second=1, kinds=("a",), retry_rate=0.05, dlq_rate=0.01, max_retries=3,
        retry_base_delay_seconds=10, retry_max_delay_seconds=20,
    )  # fmt: skip
    # Steps 10, 20, 20 (capped): means 7.5, 15, 15. 0.04 x 7.5 + 0.01 x (7.5 + 15 + 15).
    assert backoff_seconds_per_job(inputs) == pytest.approx(0.3 + 0.375)


def test_partition_scopes() -> None:
    assert partition_scope("USER#{}") == partition_scope("USER#{}#STATUS#{}") == "tenant"
    assert partition_scope("KIND#{}#STATUS#{}") == partition_scope("KIND#{}#STATUS#{}#{}") == "kind"
    assert partition_scope("GRANT") == partition_scope("GRANT#{}") == partition_scope("TX") == "shared"
    assert partition_scope("CRONRUN#{}") == "other"


def test_tenant_walls() -> None:
    # CREDITS: 2 WRU per job, 1 job in 10 is this tenant's: 0.2 x 1000 = 200; 1000 / 0.2 = 5000 jobs/s.
    assert _limit("DynamoDB writes, item USER#{} CREDITS") == pytest.approx((200, 1000, 5000))
    # The tenant's partition: 2 + 2 + 2 + 2 + 1 = 9 WRU per job, a tenth of them.
    assert _limit("DynamoDB writes, partition USER#{}") == pytest.approx((900, 1000, 1000 / 0.9))
    hot = INPUTS.model_copy(update={"hot_tenant_share": 0.5})
    assert _limit("DynamoDB writes, item USER#{} CREDITS", hot) == pytest.approx((1000, 1000, 1000))


def test_shared_index_partitions_are_divided_by_the_buckets() -> None:
    # GRANT: 1 WRU per job, every tenant, 4 buckets: 0.25 x 1000.
    assert _limit("DynamoDB writes, by_due partition GRANT (4 buckets)") == pytest.approx((250, 1000, 4000))
    # Kind/status: 1 + 2 WRU per job, half of the jobs are this kind's, 4 buckets: 3 / 2 / 4 = 0.375.
    name = "DynamoDB writes, by_kind_status partition KIND#{}#STATUS#{} (4 buckets)"
    assert _limit(name) == pytest.approx((375, 1000, 1000 / 0.375))
    one = INPUTS.model_copy(update={"index_buckets": 1})
    assert _limit("DynamoDB writes, by_due partition GRANT (1 bucket)", one) == pytest.approx(
        (1000, 1000, 1000)
    )


def test_lambda_sqs_and_api_loads() -> None:
    # One delivery per job, half of them this kind's, 2 s each: 1 execution per job/s.
    assert _limit("Lambda concurrency, one kind's consumer (mapping)") == pytest.approx((1000, 1000, 1000))
    # In flight: 0.5 x (2 s running + 10 s batch window) = 6 per job/s.
    assert _limit("SQS in-flight messages, one kind's queue") == pytest.approx((6000, 120_000, 20_000))
    # Every submit is a request: 1000 req/s against the stage's 50.
    assert _limit("API stage throttle (API_THROTTLE_RATE)") == pytest.approx((1000, 50, 50))
    # Table writes: 8 + 1 WRU per job on the (one) shard table.
    assert _limit("DynamoDB writes, shard table") == pytest.approx((9000, 40_000, 40_000 / 9))


def test_first_walls_and_the_report() -> None:
    report = model(INPUTS, PROFILE)
    first, design = report.first_wall(), report.first_wall(("design",))
    assert first is not None
    assert first.name == "API stage throttle (API_THROTTLE_RATE)"
    assert design is not None
    assert design.name == "DynamoDB writes, partition USER#{}"
    data = report.to_dict()
    assert data["first_wall"]["wall_jobs_per_second"] == pytest.approx(50)
    assert "API stage throttle (API_THROTTLE_RATE)" in data["over"]
    assert "DynamoDB writes, by_due partition GRANT (4 buckets)" not in data["over"]
    walls = [row["wall_jobs_per_second"] for row in data["limits"]]
    assert walls == sorted(walls, key=lambda wall: float("inf") if wall is None else wall)


def test_provider_quotas_per_kind() -> None:
    inputs = INPUTS.model_copy(update={"provider_rpm": {"summary": 600.0}, "provider_tpm": {"summary": 1e6}})
    # 0.5 attempts per job x 60 s: 30 per minute per job/s; 600 / 30 = 20 jobs/s.
    assert _limit("provider requests/min, summary", inputs) == pytest.approx((30_000, 600, 20))
    assert _limit("provider tokens/min, summary", inputs)[2] == pytest.approx(1e6 / (30 * 2300))
    with pytest.raises(ValidationError, match="not in the model"):
        CapacityInputs(jobs_per_second=1, kinds=("a",), provider_rpm={"b": 1.0})


def test_the_command_on_the_dev_stage_with_buckets_finds_no_design_wall_below_10000() -> None:
    result = CliRunner().invoke(
        app, ["capacity", "--jobs-per-second", "10000", "--index-buckets", "16", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["first_design_wall"]["wall_jobs_per_second"] > 10_000
    assert data["first_wall"]["owner"] != "design"
    unsharded = CliRunner().invoke(
        app, ["capacity", "--jobs-per-second", "10000", "--index-buckets", "1", "--json"]
    )
    assert json.loads(unsharded.output)["first_design_wall"]["wall_jobs_per_second"] < 10_000


def test_the_command_refuses_bad_quotas() -> None:
    result = CliRunner().invoke(app, ["capacity", "--jobs-per-second", "10", "--provider-rpm", "summary"])
    assert result.exit_code != 0
    assert "KIND=NUMBER" in result.output
    result = CliRunner().invoke(
        app, ["capacity", "--jobs-per-second", "10", "--kinds", "a", "--provider-rpm", "b=5"]
    )
    assert result.exit_code != 0
    assert "not in the model" in result.output
