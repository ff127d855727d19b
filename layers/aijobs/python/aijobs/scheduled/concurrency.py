"""Adaptive concurrency (every minute): narrow a throttled kind's consumer, widen it again when quiet.

Per kind with an event-source mapping (none with QUEUE_MAX_CONCURRENCY=1): one Query reads the
minute counters the consumers recorded and the controller's state, the mapping's current
`MaximumConcurrency` is read (a deploy may have reset it), and aijobs.aimd decides. A change is
applied to the mapping first (an absolute value, so a repeat is harmless), then recorded on the
state with a condition on the version read: two runs that read the same state compute the same
value, and only one of them records the step. The current value is a metric on every run; every
change is logged with its reason and kept in the state's history (`aijobs status`).
"""

from __future__ import annotations

from typing import Any

from aijobs.aimd import ConcurrencySettings, next_step
from aijobs.observability import METRIC_CONSUMER_CONCURRENCY, emit, logger
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.store.throttle_counts import ThrottleCounts


def run_concurrency_control(run: CronRun, ctx: CronContext) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if not ctx.concurrency.governed or not ctx.mappings:
        return {"cron": run.expression, "kinds": results, "note": "no mapping to adjust"}
    assert ctx.control is not None
    records = ThrottleCounts(ctx.meta)
    failed: list[str] = []
    for kind in ctx.kinds:
        mapping_id = ctx.mappings.get(kind)
        if mapping_id is None:
            continue
        try:
            results[kind] = _control_kind(ctx, records, kind, mapping_id)
        except Exception:
            # One kind's failure (a throttled Lambda API) must not keep the others unadjusted.
            logger.exception("adaptive concurrency failed for a kind", extra={"kind": kind})
            failed.append(kind)
    result = {"cron": run.expression, "kinds": results}
    logger.info("adaptive concurrency result", extra=result)
    if failed:
        raise RuntimeError(f"adaptive concurrency failed for {failed} (the others were adjusted)")
    return result


def _control_kind(ctx: CronContext, records: ThrottleCounts, kind: str, mapping_id: str) -> dict[str, Any]:
    assert ctx.control is not None
    now = ctx.clock()
    settings: ConcurrencySettings = ctx.concurrency_of(kind)
    counts, state = records.read(kind, now - settings.lookback)
    current = ctx.control.max_concurrency(mapping_id)
    step = next_step(
        current,
        counts,
        now=now,
        settings=settings,
        last_narrowed_at=state.narrowed_at,
        last_widened_at=state.widened_at,
    )
    if step.changed:
        assert step.value is not None
        ctx.control.set_max_concurrency(mapping_id, step.value)
        logger.warning(
            "consumer concurrency changed",
            extra={
                "kind": kind,
                "action": step.action,
                "from": current,
                "to": step.value,
                "reason": step.reason,
                "attempts": step.attempts,
                "throttled": step.throttled,
                "instances": step.instances,
            },
        )
    value = step.value if step.changed else current
    # The state always records what the mapping has, so `aijobs status` shows a deploy's reset too.
    recorded = step.changed or state.version == 0 or state.value != current
    if recorded and not records.save(kind, state, step, now, observed=current):
        logger.info("another run recorded this kind's state first", extra={"kind": kind})
    emit(METRIC_CONSUMER_CONCURRENCY, kind=kind, value=value if value is not None else settings.ceiling)
    return {"action": step.action, "maxConcurrency": value, "reason": step.reason}
