"""The capacity model (`aijobs capacity`): loads and walls derived by hand from a small profile and
a small partition trace."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from aijobs_cli.main import app
from aijobs_cli.sizing.call_profile import (
    Call,
    CallProfile,
    IndexWrite,
    ItemAccess,
    PathProfile,
    default_profile,
)
from aijobs_cli.sizing.capacity import (
    CapacityInputs,
    backoff_seconds_per_job,
    deliveries_per_job,
    model,
    path_rates,
)
from aijobs_cli.sizing.capacity_limits import partition_scope
from aijobs_cli.sizing.cost import Workload
from aijobs_cli.sizing.cost_lines import path_counts
from aijobs_cli.sizing.partition_trace import STEPS, PartitionTrace, StepWrites, default_trace, step_rates


def _index(index: str, partition: str, units: float, writes: int = 1) -> IndexWrite:
    return IndexWrite(index=index, partition=partition, writes=writes, bytes=500, units=units)


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
# 2 writes of 2 KB entries in the kind/status index: 4 WRU). Nothing fails, nobody polls.
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
            calls=(_write(_item("JOB#{}", 1, _index("by_kind_status", "KIND#{}#STATUS#{}", 4, writes=2))),),
        ),
    }
)


def _step(runs: int = 1, **writes: dict[str, float]) -> StepWrites:
    return StepWrites(runs=runs, writes=writes)


# The same life, step by step: a submit puts the job in `queued`, a grant debit and a transaction;
# a claim moves it to `running`, a success to `succeeded`; retention removes the transaction
# (deleting its TX entry, folding it into CREDITS); a grant enters GRANT and leaves it expiring.
TRACE = PartitionTrace(
    jobs=1, tenants=1, kinds=("summary",), index_buckets=1,
    steps={
        name: _step()
        for name in STEPS
    } | {
        "submit": _step(
            by_due={"GRANT#{}": 1, "TX#{}": 1}, by_kind_status={"KIND#{}#STATUS#queued#{}": 1},
            table={"USER#{} JOB#{}": 1, "USER#{} CREDITS": 1, "USER#{} GRANT#{}": 1, "USER#{} TX#{}": 1},
        ),
        "claim": _step(by_kind_status={"KIND#{}#STATUS#queued#{}": 1, "KIND#{}#STATUS#running#{}": 1}),
        "succeed": _step(by_kind_status={"KIND#{}#STATUS#running#{}": 1, "KIND#{}#STATUS#succeeded#{}": 1}),
        "grant": _step(by_due={"GRANT#{}": 1, "TX#{}": 1}, table={"USER#{} GRANT#{}": 1, "USER#{} TX#{}": 1}),
        "expire": _step(by_due={"GRANT#{}": 1}, table={"USER#{} GRANT#{}": 1}),
        "archive": _step(by_due={"TX#{}": 1}, table={"USER#{} CREDITS": 1, "USER#{} TX#{}": 1}),
    },
)  # fmt: skip

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
    grants_per_tenant_month=0,
)


def _limit(name: str, inputs: CapacityInputs = INPUTS) -> tuple[float, float, float]:
    report = model(inputs, PROFILE, TRACE)
    (found,) = [limit for limit in report.limits if limit.name == name]
    return found.load(inputs.jobs_per_second), found.ceiling, found.wall


def test_path_rates_are_the_cost_models_job_fates_per_job() -> None:
    inputs = CapacityInputs(
        jobs_per_second=1, kinds=("a",), retry_rate=0.05, dlq_rate=0.01, failed_final_rate=0.02,
        idempotency_rate=0.3, polls_per_job=3, poll_wait_seconds=2, max_retries=3,
    )  # fmt: skip
    jobs = 1_000_000
    counts = path_counts(
        Workload(
            jobs_per_month=jobs, retry_rate=0.05, dlq_rate=0.01, failed_final_rate=0.02,
            idempotency_key_rate=0.3, status_polls_per_job=3, poll_wait_seconds=2, max_retries=3,
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


def test_steps_per_job_follow_the_paths_and_every_transaction_is_archived_once() -> None:
    rates = step_rates(path_rates(INPUTS), grants_per_job=0.5, trace=TRACE)
    assert rates["submit"] == rates["claim"] == rates["succeed"] == 1
    assert rates["grant"] == rates["expire"] == 0.5
    # One transaction per submit and one per grant: each removed by retention once.
    assert rates["archive"] == pytest.approx(1.5)
    # The measured trace: a job that retries claims twice; a dead-lettered one is failed with a refund.
    retried = INPUTS.model_copy(update={"retry_rate": 0.1, "dlq_rate": 0.02, "max_retries": 3})
    rates = step_rates(path_rates(retried), grants_per_job=0, trace=default_trace())
    assert rates["claim"] == pytest.approx(1 + 0.08 + 0.02 * 3)
    assert rates["fail_final"] == pytest.approx(0.02)
    # With retention configured every transaction is folded as written: nothing left to archive.
    assert rates["archive"] == 0


def test_tenant_walls() -> None:
    # CREDITS: 2 WRU per submit and 2 when retention folds its transaction in, 1 job in 10 is this
    # tenant's: 0.4 x 1000 = 400; 1000 / 0.4 = 2500 jobs/s.
    assert _limit("DynamoDB writes, item USER#{} CREDITS") == pytest.approx((400, 1000, 2500))
    # The tenant's partition: 2 + 2 + 2 + 2 + 1 = 9 WRU per job, and retention's 2 items x 2 WRU.
    assert _limit("DynamoDB writes, partition USER#{}") == pytest.approx((1300, 1000, 1000 / 1.3))
    hot = INPUTS.model_copy(update={"hot_tenant_share": 0.25})
    assert _limit("DynamoDB writes, item USER#{} CREDITS", hot) == pytest.approx((1000, 1000, 1000))


def test_shared_index_partitions_are_divided_by_the_buckets() -> None:
    # GRANT: 1 WRU per job, every tenant, 4 buckets: 0.25 x 1000.
    assert _limit("DynamoDB writes, by_due partition GRANT#{} (4 buckets)") == pytest.approx(
        (250, 1000, 4000)
    )
    # TX: put by the submit, deleted by retention: 2 per job / 4 buckets.
    assert _limit("DynamoDB writes, by_due partition TX#{} (4 buckets)") == pytest.approx((500, 1000, 2000))
    # Each status of a kind its own partition: a job enters and leaves `running` (2 writes of 2 WRU,
    # the entries' size from the profile), half of the jobs are this kind's, 4 buckets: 4 / 2 / 4.
    name = "DynamoDB writes, by_kind_status partition KIND#{}#STATUS#running#{} (4 buckets)"
    assert _limit(name) == pytest.approx((500, 1000, 2000))
    name = "DynamoDB writes, by_kind_status partition KIND#{}#STATUS#succeeded#{} (4 buckets)"
    assert _limit(name) == pytest.approx((250, 1000, 4000))
    one = INPUTS.model_copy(update={"index_buckets": 1})
    assert _limit("DynamoDB writes, by_due partition TX#{} (1 bucket)", one) == pytest.approx(
        (2000, 1000, 500)
    )


def test_maintenance_limits_per_run_and_shard_are_walls_of_the_design() -> None:
    # */10: 6 runs an hour, at most 100 transactions each: 600 an hour, 1/6 per second per shard.
    inputs = INPUTS.model_copy(update={"cron_runs": {"*/10 * * * *": 6.0}, "shard_count": 2})
    load, ceiling, wall = _limit("Maintenance, credit transactions removed by retention", inputs)
    assert ceiling == pytest.approx(100 * 6 / 3600)
    assert (load, wall) == pytest.approx((1000 / 2, ceiling * 2))  # 1 transaction per job, half a shard's
    # Grants follow the tenants: 10 tenants x 2 a month, each 1 transaction when granted (this
    # trace's grant expires without one), whatever the job rate.
    granted = inputs.model_copy(update={"grants_per_tenant_month": 2.0})
    per_second = 10 * 2 / (30 * 86_400)
    load, _, wall = _limit("Maintenance, credit transactions removed by retention", granted)
    assert load == pytest.approx((1000 + per_second) / 2)
    load, ceiling, wall = _limit("Maintenance, credit grants expired", granted)
    assert (load, ceiling, wall) == pytest.approx((per_second / 2, 20 * 6 / 3600, float("inf")))
    crowded = granted.model_copy(update={"tenants": 200_000})
    assert _limit("Maintenance, credit grants expired", crowded)[2] == 0  # past it at any job rate
    # A finished job's row carries its own TTL: DynamoDB removes it, the run is only the backstop.
    assert not [limit for limit in model(inputs, PROFILE, TRACE).limits if "finished jobs" in limit.name]
    assert not [limit for limit in model(INPUTS, PROFILE, TRACE).limits if limit.name.startswith("Maint")]


def test_lambda_sqs_and_api_loads() -> None:
    # One delivery per job, half of them this kind's, 2 s each: 1 execution per job/s.
    assert _limit("Lambda concurrency, one kind's consumer (mapping)") == pytest.approx((1000, 1000, 1000))
    # In flight: 0.5 x (2 s running + 10 s batch window) = 6 per job/s.
    assert _limit("SQS in-flight messages, one kind's queue") == pytest.approx((6000, 120_000, 20_000))
    # Every submit is a request: 1000 req/s against the stage's 50.
    assert _limit("API stage throttle (API_THROTTLE_RATE)") == pytest.approx((1000, 50, 50))
    # Table writes: 8 + 1 WRU per job on the (one) shard table, and retention's 2 items x 2 WRU.
    assert _limit("DynamoDB writes, shard table") == pytest.approx((13_000, 40_000, 40_000 / 13))


def test_a_long_poll_holds_an_api_execution_for_its_wait() -> None:
    short = INPUTS.model_copy(update={"polls_per_job": 1, "poll_wait_seconds": 0, "producer_ms": 50})
    long = INPUTS.model_copy(update={"polls_per_job": 1, "poll_wait_seconds": 4, "producer_ms": 50})

    # 1,000 jobs/s x (a submit and a poll of 50 ms each): 100 executions; waiting 4 s each: 4,100.
    def api_executions(inputs: CapacityInputs) -> float:
        report = model(inputs, default_profile(), TRACE)
        (found,) = [limit for limit in report.limits if limit.name == "Lambda concurrency, api function"]
        return found.load(inputs.jobs_per_second)

    assert api_executions(short) == pytest.approx(100)
    assert api_executions(long) == pytest.approx(4100)
    assert path_rates(long)["producer.poll"] == 6  # reads at 0, 0.25, 0.75, 1.75, 3.75 and 4 s


def test_first_walls_and_the_report() -> None:
    report = model(INPUTS, PROFILE)
    first, design = report.first_wall(), report.first_wall(("design",))
    assert first is not None
    assert first.name == "API stage throttle (API_THROTTLE_RATE)"
    assert design is not None
    assert design.name == "DynamoDB writes, partition USER#{}"
    assert report.first_partition_wall() is design
    data = report.to_dict()
    assert data["first_wall"]["wall_jobs_per_second"] == pytest.approx(50)
    assert "API stage throttle (API_THROTTLE_RATE)" in data["over"]
    assert "DynamoDB writes, by_due partition GRANT#{} (4 buckets)" not in data["over"]
    walls = [row["wall_jobs_per_second"] for row in data["limits"]]
    assert walls == sorted(walls, key=lambda wall: float("inf") if wall is None else wall)


def test_provider_quotas_per_kind() -> None:
    inputs = INPUTS.model_copy(update={"provider_rpm": {"summary": 600.0}, "provider_tpm": {"summary": 1e6}})
    # 0.5 attempts per job x 60 s: 30 per minute per job/s; 600 / 30 = 20 jobs/s.
    assert _limit("provider requests/min, summary", inputs) == pytest.approx((30_000, 600, 20))
    assert _limit("provider tokens/min, summary", inputs)[2] == pytest.approx(1e6 / (30 * 2300))
    with pytest.raises(ValidationError, match="not in the model"):
        CapacityInputs(jobs_per_second=1, kinds=("a",), provider_rpm={"b": 1.0})


def test_the_command_on_the_prod_stage_finds_no_partition_wall_below_10000() -> None:
    result = CliRunner().invoke(app, ["capacity", "--jobs-per-second", "10000", "--stage", "prod", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["inputs"]["index_buckets"] == 32
    assert data["first_partition_wall"]["wall_jobs_per_second"] > 10_000
    # Nothing of aijobs' own design is reached at 10,000 jobs/s: what is, is the stage's throttle
    # and AWS's quotas.
    assert data["first_design_wall"]["wall_jobs_per_second"] > 10_000
    assert data["first_wall"]["owner"] == "config"
    reached = [limit for limit in data["limits"] if (limit["wall_jobs_per_second"] or float("inf")) < 10_000]
    assert len(reached) > 3
    assert all(limit["owner"] in ("config", "quota") for limit in reached)
    for buckets in ("8", "1"):
        other = CliRunner().invoke(
            app,
            [
                "capacity",
                "--jobs-per-second",
                "10000",
                "--stage",
                "prod",
                "--index-buckets",
                buckets,
                "--json",
            ],
        )
        wall = json.loads(other.output)["first_partition_wall"]
        assert wall["wall_jobs_per_second"] < 10_000
        assert wall["name"].startswith("DynamoDB writes, by_due partition GRANT#{}")


def test_the_command_refuses_bad_quotas() -> None:
    result = CliRunner().invoke(app, ["capacity", "--jobs-per-second", "10", "--provider-rpm", "summary"])
    assert result.exit_code != 0
    assert "KIND=NUMBER" in result.output
    result = CliRunner().invoke(
        app, ["capacity", "--jobs-per-second", "10", "--kinds", "a", "--provider-rpm", "b=5"]
    )
    assert result.exit_code != 0
    assert "not in the model" in result.output
