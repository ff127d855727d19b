"""Load a stage's configuration: `.env.<stage>` overlaid with the same keys from CDK context."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dotenv import dotenv_values

from aijobs.stage_config import KNOWN_KEYS, ConfigError, StageConfig, parse_stage_config
from aijobs_cdk import REPO_ROOT

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
    return config


def check_registrations(config: StageConfig) -> None:
    """Every configured queue and cron needs a registered handler; otherwise its work would be
    acknowledged and dropped at run time. Fail the synth instead, naming what is missing."""
    from aijobs.consumer.registry import QUEUE_HANDLERS
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    queues = [name for name in config.queue_names if name not in QUEUE_HANDLERS]
    if queues:
        raise ConfigError(
            f"QUEUE_NAMES {queues} have no handler in aijobs/consumer/registry.py (QUEUE_HANDLERS)"
        )
    crons = [cron.text for cron in config.crons if cron.text not in SCHEDULED_HANDLERS]
    if crons:
        raise ConfigError(
            f"CRONS {crons} have no handler in aijobs/scheduled/registry.py (SCHEDULED_HANDLERS)"
        )
