"""Load a stage's configuration: `.env.<stage>` overlaid with the same keys from CDK context."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dotenv import dotenv_values

from aijobs_cdk import REPO_ROOT
from aijobs_cdk.stage_config import KNOWN_KEYS, ConfigError, StageConfig, parse_stage_config

DEFAULT_STAGE = "dev"


def load_stage_config(
    stage: str, context: Mapping[str, object] | None = None, env_dir: Path = REPO_ROOT
) -> StageConfig:
    """Read `.env.<stage>`; a context value for a known key (`-c QUEUE_NAMES=...`) wins over the file."""
    env_file = env_dir / f".env.{stage}"
    if not env_file.is_file():
        raise ConfigError(f"stage {stage!r} has no configuration file {env_file.name} in {env_dir}")
    values: dict[str, str | None] = dict(dotenv_values(env_file))
    for key, value in (context or {}).items():
        if key in KNOWN_KEYS and value is not None:
            values[key] = str(value)
    config = parse_stage_config(stage, values)
    check_registrations(config)
    # A narrower `-c QUEUE_NAMES=...` is a deliberate choice of this synth; the file must account
    # for every declared kind.
    if not (context or {}).get("QUEUE_NAMES"):
        check_declared_kinds(config, env_file.name)
    return config


def check_declared_kinds(config: StageConfig, source: str) -> None:
    """Every declared kind is deployed (QUEUE_NAMES) or skipped on purpose (SKIP_KINDS), so a kind
    added to aijobs/kinds/ is never silently missing from a stage; a skipped name must be declared."""
    from aijobs.kinds.registry import queued as declared_queued

    queued = declared_queued()
    missing = [name for name in queued if name not in config.queue_names and name not in config.skip_kinds]
    if missing:
        raise ConfigError(
            f"{source}: kinds {missing} are declared (aijobs/kinds/) but stage {config.stage!r} neither "
            "deploys them (QUEUE_NAMES) nor skips them (SKIP_KINDS): add each to one of the two"
        )
    unknown = [name for name in config.skip_kinds if name not in queued]
    if unknown:
        raise ConfigError(
            f"{source}: SKIP_KINDS names kinds that are not declared (aijobs/kinds/): {unknown}"
        )
    both = [name for name in config.skip_kinds if name in config.queue_names]
    if both:
        raise ConfigError(f"{source}: kinds {both} are both in QUEUE_NAMES and in SKIP_KINDS")


def check_registrations(config: StageConfig) -> None:
    """Every configured queue and cron needs a registered handler; otherwise its work would be
    acknowledged and dropped at run time. Fail the synth instead, naming what is missing."""
    from aijobs.consumer.registry import QUEUE_HANDLERS
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    queues = [name for name in config.queue_names if name not in QUEUE_HANDLERS]
    if queues:
        raise ConfigError(
            f"QUEUE_NAMES {queues} are neither declared kinds (aijobs/kinds/<name>.py) nor workflows "
            "(aijobs/workflows/registry.py)"
        )
    crons = [cron.text for cron in config.crons if cron.text not in SCHEDULED_HANDLERS]
    if crons:
        raise ConfigError(
            f"CRONS {crons} have no handler in aijobs/scheduled/registry.py (SCHEDULED_HANDLERS)"
        )
