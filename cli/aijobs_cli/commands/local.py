"""`aijobs dev` (the local stack), `sam-env` and `events` (the files `sam local invoke` reads)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from aijobs_cli.commands._common import (
    DEFAULT_INFO,
    AsJson,
    InfoFile,
    Profile,
    Region,
    Stack,
    _emit,
    _fail,
    err,
    out,
)

if TYPE_CHECKING:
    from aijobs_cdk.stage_config import StageConfig
    from aijobs_cli.local.stack import LocalStack


def dev(
    port: Annotated[int, typer.Option(help="port of the local HTTP API (0: any free port)")] = 8080,
    info_file: Annotated[
        Path, typer.Option("--info-file", help="where to write connection details")
    ] = DEFAULT_INFO,
    stage: Annotated[str, typer.Option(help="stage configuration to run (.env.<stage>)")] = "local",
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider",
            help="KIND=PROVIDER, repeatable (e.g. summary=openai); replaces the file's KIND_PROVIDERS",
        ),
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option("--model", help="KIND=MODEL, repeatable (e.g. summary=llama3.2); replaces KIND_MODELS"),
    ] = None,
    openai_base_url: Annotated[
        str | None,
        typer.Option(help="an OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1 (Ollama)"),
    ] = None,
) -> None:
    """Start the whole system locally (moto, HTTP API, pollers, DLQ consumer, schedules). Ctrl-C stops it.

    Real models on a laptop: `--provider summary=openai --openai-base-url http://127.0.0.1:11434/v1`
    (the key, if the server wants one, comes from the OPENAI_API_KEY environment variable)."""
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cdk.stage_config import ConfigError
    from aijobs_cli.local.stack import LocalStack

    overrides: dict[str, object] = {}
    if provider:
        overrides["KIND_PROVIDERS"] = ";".join(provider)
    if model:
        overrides["KIND_MODELS"] = ";".join(model)
    if openai_base_url:
        overrides["OPENAI_BASE_URL"] = openai_base_url
    try:
        config = load_stage_config(stage, overrides)
    except ConfigError as error:
        raise _fail(f"invalid stage configuration: {error}") from None
    info_file.parent.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(
        config, port=port, info_file=info_file, log=lambda line: err.print(f"[yellow]{line}[/yellow]")
    )
    try:
        stack.start()
    except OSError as error:
        raise _fail(f"could not start: {error} (is port {port} free? try --port 0)") from None
    _print_banner(stack, config, info_file)
    _run_until_stopped(stack, info_file)


def _print_banner(stack: LocalStack, config: StageConfig, info_file: Path) -> None:
    """Where the local stack answers, its keys and a few commands to try."""
    key = stack.api_key
    examples = "\n".join(
        [
            f'curl -s -X POST {stack.api_url}/jobs -H "Authorization: Bearer {key}" \\',
            '  -H "Content-Type: application/json" \\',
            """  -d '{"kind":"summary","input":"#fail:503x2 A long text. To summarise."}'""",
            f'curl -s "{stack.api_url}/jobs/<jobId>?wait=20" -H "Authorization: Bearer {key}"',
            f'curl -s {stack.api_url}/credits -H "Authorization: Bearer {key}"',
            f"aijobs demo --info-file {info_file}",
        ]
    )
    out.rule("aijobs local stack")
    out.print(
        f"[bold]API[/bold]        {stack.api_url}   (OpenAPI: {stack.api_url}/openapi.json)\n"
        f"[bold]API key[/bold]    {key}   (user '{stack.info()['demo_user']}', with credits)\n"
        f"[bold]admin key[/bold]  {stack.admin_key}   (operator: {stack.api_url}/_local/*, `aijobs resume`)\n"
        f"[bold]console[/bold]    {stack.api_url}/console   (sign in with the admin key)\n"
        f"[bold]AWS (moto)[/bold] {stack.endpoint_url}\n"
        f"[bold]stage[/bold]      {config.stage}: queues {', '.join(config.queue_names)}\n"
        f"[bold]info file[/bold]  {info_file}\n\n{examples}\n\nCtrl-C stops it."
    )
    out.rule()


def _run_until_stopped(stack: LocalStack, info_file: Path) -> None:
    """Run until Ctrl-C (or SIGTERM), then stop the stack and remove its connection file."""
    stopping = {"now": False}

    def _stop(*_args: Any) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stopping["now"]:
            time.sleep(0.2)
    finally:
        out.print("stopping…")
        stack.stop()
        info_file.unlink(missing_ok=True)
        out.print("stopped.")


# --- sam local invoke ----------------------------------------------------------------------------


def sam_env(
    template: Annotated[
        Path, typer.Option("--template", help="synthesized template, e.g. cdk.out/aijobs-dev.template.json")
    ],
    out_file: Annotated[Path, typer.Option("--out", help="the --env-vars file to write")] = Path(
        ".aijobs/sam-env.json"
    ),
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    endpoint_host: Annotated[
        str,
        typer.Option(
            "--endpoint-host",
            help="how a SAM container reaches this machine (127.0.0.1 with `--docker-network host`)",
        ),
    ] = "host.docker.internal",
    as_json: AsJson = False,
) -> None:
    """Write the `sam local invoke --env-vars` file: each function's environment with real names,
    from a deployed stack (--stack) or the local stack (--info-file, the default)."""
    from aijobs_cli.local import sam_env as env_file

    if stack and info_file:
        raise _fail("pass --stack NAME or --info-file FILE, not both")
    try:
        written = env_file.generate(
            template, out_file, stack=stack, profile=profile, region=region,
            info_file=None if stack else (info_file or DEFAULT_INFO), endpoint_host=endpoint_host,
        )  # fmt: skip
    except env_file.SamEnvError as error:
        raise _fail(str(error)) from None
    result = {
        "envFile": str(written.env_file),
        "template": str(written.template),
        "eventsDir": str(written.events_dir),
        "events": written.events,
    }
    _emit(result, as_json, lambda _r: out.print(env_file.usage(written), markup=False, highlight=False))


def events(
    stage: Annotated[str, typer.Option(help="write the events of .env.<stage>'s kinds and crons")] = "dev",
    out_dir: Annotated[Path, typer.Option("--out", help="folder to write them to")] = Path(".aijobs/events"),
    as_json: AsJson = False,
) -> None:
    """Write the sample events for `sam local invoke -e`: an SQS batch per job kind of the stage
    (`sqs-<kind>-batch.json`, from the queue `aijobs-<stage>-<kind>`), the input of each cron's
    schedule (`schedule-<handler>.json`), and the hand-written events of events/ (API, DLQ,
    webhooks). `aijobs sam-env` writes the same, naming a deployed stage's real queues."""
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cdk.stage_config import ConfigError
    from aijobs_cli.local.sample_events import stage_events, write_events

    try:
        written = write_events(out_dir, stage_events(load_stage_config(stage)))
    except (ConfigError, ValueError) as error:
        raise _fail(str(error)) from None
    result = {"outDir": str(out_dir), "events": [path.name for path in written]}
    lines = [f"wrote {len(written)} sample events to {out_dir}", *(f"  {name}" for name in result["events"])]
    _emit(result, as_json, lambda _r: out.print("\n".join(lines), markup=False, highlight=False))
