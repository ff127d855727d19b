"""The weekly model check (`0 6 * * 1`): is every Bedrock model the stage calls still alive?

The same check as `aijobs models check` (aijobs.providers.lifecycle), in the function's own region:
one `GetFoundationModel` per foundation model of the stage's plan (each kind's default and
allow-listed models). A model found Legacy alerts while there is time to migrate (its end-of-life
date in the alert), one found past its end of life (or unknown to the region) alerts too; each
once per model and state (a conditional marker in the meta table, aijobs.store.model_alerts), so
a weekly run repeats nothing. A model whose lifecycle could not be read (no permission,
throttled) fails the run after the others were checked: the dispatcher alerts once per incident.
"""

from __future__ import annotations

from typing import Any

from aijobs.observability import logger
from aijobs.scheduled.context import CronContext, CronRun


def run_model_check(run: CronRun, ctx: CronContext) -> dict[str, Any]:
    from aijobs.providers.lifecycle import (
        END_OF_LIFE,
        LEGACY,
        NOT_FOUND,
        UNKNOWN,
        bedrock_models,
        check_models,
    )
    from aijobs.store import model_alerts
    from aijobs.store.model_alerts import ModelAlerts

    models = bedrock_models(ctx.plans.values())
    if not models or ctx.bedrock is None:
        return {"cron": run.expression, "models": {}, "note": "the stage calls no Bedrock model"}
    checks = check_models(models, [ctx.bedrock()])
    states = {
        LEGACY: model_alerts.LEGACY,
        END_OF_LIFE: model_alerts.END_OF_LIFE,
        NOT_FOUND: model_alerts.NOT_FOUND,
    }
    markers = ModelAlerts(ctx.meta)
    alerted: list[str] = []
    for check in checks:
        state = states.get(check.status)
        if state is None:
            continue
        now = ctx.clock()
        if not markers.mark(check.model, state, now):
            continue  # alerted by an earlier run
        detail = {
            "model": check.model,
            "region": check.region,
            "status": check.status,
            "kinds": list(check.kinds),
            "legacySince": check.legacy_at,
            "extendedAccessFrom": check.extended_access_at,
            "endOfLife": check.end_of_life_at,
            "error": check.detail[:300] or None,
            "fix": "pick a current model for these kinds (KIND_MODELS / KIND_ALLOWED_MODELS in "
            f".env.{ctx.stage}) and deploy; `aijobs models check --stack aijobs-{ctx.stage}` shows them all",
        }
        if check.status == LEGACY:
            detail["note"] = (
                "still callable until its end of life; an account that has not used it lately may "
                "already be refused (model_unavailable)"
            )
        try:
            ctx.alerts.publish(f"aijobs {ctx.stage}: model {check.model} is {check.status}", detail)
        except Exception:
            markers.withdraw(check.model, state, now)  # the next run alerts again
            raise
        alerted.append(check.model)
    result = {
        "cron": run.expression,
        "models": {f"{check.model}@{check.region}": check.status for check in checks},
        "alerted": alerted,
    }
    logger.info("model check result", extra=result)
    unknown = [check.model for check in checks if check.status == UNKNOWN]
    if unknown:
        raise RuntimeError(f"the lifecycle of {unknown} could not be read (the others were checked)")
    return result
