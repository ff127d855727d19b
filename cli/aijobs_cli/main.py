"""`aijobs`: run the local stack and operate a local or deployed stage.

Every command takes `--info-file FILE` (the file `aijobs dev` writes) for the local stack. Job
commands take `--api-url/--api-key` for a deployed stage; operator commands take `--stack NAME`
(with `--profile/--region`) and read the stack's outputs. `--json` prints machine-readable output;
bad input exits non-zero with a message.
"""

from __future__ import annotations

from typing import Annotated

import typer

from aijobs_cli.commands import accounts, demo, jobs, kinds, local, operator, sizing, soak, spend
from aijobs_cli.commands._common import CurrentStderr, out
from aijobs_cli.commands.models import models_app

app = typer.Typer(help="aijobs: asynchronous AI jobs on AWS, locally or deployed.", no_args_is_help=True)

# The order here is the order of `aijobs --help`.
app.command("new-kind")(kinds.new_kind)
app.command()(local.dev)
app.command()(jobs.submit)
app.command()(jobs.status)
app.command()(jobs.children)
app.command()(jobs.cancel)
app.command("list")(jobs.list_jobs)
app.command()(operator.rerun)
app.command()(operator.redrive)
app.command("fail-final")(operator.fail_final)
app.command()(operator.resume)
app.command()(sizing.cost)
app.command()(sizing.capacity)
app.command("sam-env")(local.sam_env)
app.command()(local.events)
app.command()(demo.demo)
app.command()(soak.soak)
for sub, name in (
    (operator.dlq_app, "dlq"),
    (accounts.keys_app, "keys"),
    (accounts.tenants_app, "tenants"),
    (accounts.webhooks_app, "webhooks"),
    (spend.spend_app, "spend"),
    (accounts.credits_app, "credits"),
    (operator.cron_app, "cron"),
    (operator.config_app, "config"),
    (models_app, "models"),
):
    app.add_typer(sub, name=name)


def _print_version(value: bool) -> None:
    if value:
        import aijobs

        out.print(f"aijobs {aijobs.__version__}")  # the CHANGELOG's heading for this release
        raise typer.Exit()


@app.callback()
def _quiet_library(
    ctx: typer.Context,
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="print the version and exit",
        ),
    ] = False,
) -> None:
    """Keep stdout for the command's own output (`--json` must parse): the library's JSON logs go
    to stderr at WARNING and its metrics stay off, except in `dev`, whose logs are the point."""
    if ctx.invoked_subcommand == "dev":
        return
    import os

    from aijobs.observability import logger

    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    logger.setLevel("WARNING")
    logger.registered_handler.setStream(CurrentStderr())  # type: ignore[attr-defined]


if __name__ == "__main__":
    app()
