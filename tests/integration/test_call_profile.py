"""The call profile `aijobs cost` reads is the code's own: measured again here and compared with the
committed file, and the billing rules it is measured with checked on their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aijobs.store.keys import SHARD_INDEXES
from aijobs_cli.sizing.call_profile import (
    CRON_DISPATCHER,
    REGENERATE,
    Call,
    CallProfile,
    ItemAccess,
    attribute_size,
    default_profile,
    item_size,
    key_template,
    number_size,
    profile_path,
    read_units,
    write_units,
)
from tests.aws_calls import TableShape, _index_writes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> CallProfile:
    target = tmp_path_factory.mktemp("profile") / "call_profile.json"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/benchmark.py"), "--write-profile", str(target)],
        capture_output=True, text=True, check=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return CallProfile.from_json(target)


def _not_yet_committed(committed: CallProfile) -> set[str]:
    """Paths of crons registered since the committed profile was written (a team's own): measured
    here, priced by `aijobs cost` as the dispatcher's own run until someone regenerates the file."""
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    return {f"cron {expression}" for expression in SCHEDULED_HANDLERS} - set(committed.paths)


def test_the_committed_profile_is_what_the_code_does_now(measured: CallProfile) -> None:
    committed = CallProfile.from_json(profile_path())
    new = _not_yet_committed(committed)
    stale = sorted(
        name
        for name in (set(measured.paths) | set(committed.paths)) - new
        if measured.paths.get(name) != committed.paths.get(name)
    )
    hint = f"run `{REGENERATE}` and commit cli/aijobs_cli/sizing/call_profile.json"
    assert not stale, f"the call profile is stale (paths that changed: {stale}): {hint}"
    known = {name: path for name, path in measured.paths.items() if name not in new}
    assert measured.model_copy(update={"paths": known}) == committed, (
        f"the call profile's header is stale: {hint}"
    )
    assert default_profile() == committed  # the package reads the same file


def test_a_cron_registered_after_the_profile_was_written_needs_no_new_profile(
    measured: CallProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aijobs.scheduled import registry

    new = next(text for n in range(60) if (text := f"{n} 4 * * *") not in registry.SCHEDULED_HANDLERS)
    monkeypatch.setitem(registry.SCHEDULED_HANDLERS, new, lambda _run, _ctx: {})
    assert _not_yet_committed(measured) == {f"cron {new}"}  # not stale: new
    assert measured.cron_or_estimate(new) == (measured.path(CRON_DISPATCHER), True)
    assert measured.cron_or_estimate("*/10 * * * *") == (measured.cron("*/10 * * * *"), False)


def test_every_path_and_every_registered_cron_is_measured(measured: CallProfile) -> None:
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    for name in ("producer.submit", "producer.poll", "consumer.success", "consumer.retry", "dlq.dead_letter"):
        assert measured.path(name).calls, name
    for expression in SCHEDULED_HANDLERS:
        assert measured.cron(expression).calls, expression
    # The estimate of a cron not measured yet is a lower bound: every cron run claims, finishes and
    # checks its incident as the dispatcher's own run does, then does its handler's work.
    dispatcher = measured.path(CRON_DISPATCHER)
    assert {c.operation for c in dispatcher.calls} == {"PutItem", "UpdateItem"}
    assert all(c.table == "meta" for c in dispatcher.calls)
    reads, writes = dispatcher.units()
    for expression in SCHEDULED_HANDLERS:
        cron_reads, cron_writes = measured.cron(expression).units()
        assert cron_reads >= reads, expression
        assert cron_writes >= writes, expression
    assert measured.measured_kinds == ("summary",)  # the consumer paths' plain single-call job


def test_a_submit_is_one_transaction_billed_per_item_and_per_index_entry(measured: CallProfile) -> None:
    submit = measured.path("producer.submit")
    (transaction,) = [c for c in submit.calls if c.operation == "TransactWriteItems"]
    assert transaction.table == "shard"
    # 2 WRU per item (each under 1 KB), whatever the item.
    assert transaction.write_units == 2 * len(transaction.items)
    (job,) = [item for item in transaction.items if item.sort == "JOB#{}"]
    assert (job.action, job.partition, job.changed) == ("Put", "USER#{}", True)
    # A new job row enters the tenant's status index and one bucket of the kind/status index shared
    # by all tenants (write-sharded: `KIND#<kind>#STATUS#<status>#<bucket>`).
    assert {(w.index, w.partition, w.writes) for w in job.index_writes} == {
        ("by_user_status", "USER#{}#STATUS#{}", 1),
        ("by_kind_status", "KIND#{}#STATUS#{}#{}", 1),
    }
    assert transaction.index_write_units == sum(w.units for i in transaction.items for w in i.index_writes)
    assert submit.count("sqs", "SendMessage", table="queue") == 1


def test_a_status_change_moves_the_job_in_both_indexes(measured: CallProfile) -> None:
    claim = measured.path("consumer.success").calls[0]
    assert claim.operation == "UpdateItem"
    (job,) = claim.items
    assert {(w.index, w.writes) for w in job.index_writes} == {("by_user_status", 2), ("by_kind_status", 2)}
    assert claim.index_write_units == 4


def test_idempotency_key_adds_one_item_to_the_transaction(measured: CallProfile) -> None:
    plain = measured.path("producer.submit").units()[1]
    keyed = measured.path("producer.submit_idempotent").units()[1]
    assert keyed - plain == 2  # one more transactional item under 1 KB


# --- the billing rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    # Leading and trailing zeros are trimmed: 1700000000 is 17e8.
    [("0", 2), ("1", 2), ("12", 2), ("123", 3), ("1700000000", 2), ("1700000001", 6), ("-5", 3), ("100", 2)],
)
def test_number_sizes(text: str, size: int) -> None:
    assert number_size(text) == size


def test_item_sizes_count_names_values_and_container_overhead() -> None:
    assert item_size({"pk": {"S": "USER#é"}}) == 2 + 7
    assert attribute_size({"BOOL": True}) == attribute_size({"NULL": True}) == 1
    assert attribute_size({"L": [{"S": "ab"}, {"N": "1"}]}) == 3 + (1 + 2) + (1 + 2)
    assert attribute_size({"M": {"k": {"S": "v"}}}) == 3 + 1 + 1 + 1
    assert attribute_size({"SS": ["a", "bc"]}) == 3
    assert item_size(None) == 0


def test_units_round_up_per_kb_and_per_4kb() -> None:
    assert write_units(0) == write_units(1024) == 1
    assert write_units(1025) == 2
    assert write_units(1025, transactional=True) == 4
    assert read_units(0, consistent=True) == 1
    assert read_units(4097, consistent=True) == 2
    assert read_units(4097, consistent=False) == 1
    assert read_units(10, consistent=True, transactional=True) == 2


def test_key_templates_keep_constants_only() -> None:
    assert key_template("USER#alice") == "USER#{}"
    assert key_template("KIND#summary#STATUS#queued") == "KIND#{}#STATUS#{}"
    assert key_template("CREDITS") == "CREDITS"
    assert key_template("JOB#01KB4S6Q5Z3M8N2P4R6T8V0X2A") == "JOB#{}"
    assert key_template("CRONRUN#*/10 * * * *") == "CRONRUN#{}"


def _row(status: str, pad: int = 0) -> dict[str, dict[str, str]]:
    return {
        "pk": {"S": "USER#a"},
        "sk": {"S": "JOB#1"},
        "gsi1pk": {"S": f"USER#a#STATUS#{status}"},
        "gsi1sk": {"S": "JOB#1"},
        "gsi2pk": {"S": f"KIND#k#STATUS#{status}"},
        "gsi2sk": {"S": "t#1"},
        "pad": {"S": "x" * pad},
    }


def test_index_writes_follow_awss_rules() -> None:
    shape = TableShape("shard", SHARD_INDEXES)
    put = {w.index: w.writes for w in _index_writes(shape, None, _row("queued"))}
    assert put == {"by_user_status": 1, "by_kind_status": 1}  # not in by_due: no gsi3 keys
    moved = {w.index: w.writes for w in _index_writes(shape, _row("queued"), _row("running"))}
    assert moved == {"by_user_status": 2, "by_kind_status": 2}
    in_place = {w.index: w.writes for w in _index_writes(shape, _row("queued"), _row("queued", pad=5))}
    assert in_place == {"by_user_status": 1, "by_kind_status": 1}
    deleted = {w.index: w.writes for w in _index_writes(shape, _row("queued"), None)}
    assert deleted == {"by_user_status": 1, "by_kind_status": 1}
    (big,) = [w for w in _index_writes(shape, None, _row("queued", pad=2900)) if w.index == "by_user_status"]
    assert big.units == 3


def test_a_larger_job_row_reprices_its_reads_writes_and_index_entries() -> None:
    job = ItemAccess(action="Update", table="shard", partition="USER#{}", sort="JOB#{}", bytes=800, units=1.0)
    call = Call(service="dynamodb", operation="UpdateItem", table="shard", write_units=1.0, items=(job,))
    assert call.units() == (0.0, 1.0)
    assert call.units(job_row_bytes=3000) == (0.0, 3.0)
    other = job.model_copy(update={"sort": "CREDITS"})
    assert Call(service="dynamodb", operation="UpdateItem", write_units=1.0, items=(other,)).units(3000) == (
        0.0,
        1.0,
    )
