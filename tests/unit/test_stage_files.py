"""A stage file accounts for every declared kind: each one is deployed (QUEUE_NAMES) or skipped on
purpose (SKIP_KINDS), so a kind added to aijobs/kinds/ is never silently missing from a stage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aijobs.kinds.registry import queued
from aijobs_cdk import REPO_ROOT
from aijobs_cdk.stage import load_stage_config
from aijobs_cdk.stage_config import ConfigError

QUEUED = queued()


def _stage_file(tmp_path: Path, stage: str, replace: dict[str, str]) -> Path:
    text = (REPO_ROOT / f".env.{stage}").read_text()
    for key, value in replace.items():
        text, count = re.subn(rf"^{key}=.*$", f"{key}={value}", text, flags=re.MULTILINE)
        if not count:
            text += f"\n{key}={value}\n"
    (tmp_path / f".env.{stage}").write_text(text)
    return tmp_path


@pytest.mark.parametrize("stage", ["local", "dev", "prod"])
def test_every_shipped_stage_file_accounts_for_every_declared_kind(stage: str) -> None:
    config = load_stage_config(stage, {"ALERT_EMAIL": "ops@example.com"} if stage == "prod" else None)
    for name in QUEUED:
        assert (name in config.queue_names) != (name in config.skip_kinds), name


def test_a_declared_kind_a_stage_forgets_is_an_error_naming_both(tmp_path: Path) -> None:
    config = load_stage_config("dev")
    forgotten = "video-generate"  # no workflow runs its parts as it
    kept = ";".join(name for name in config.queue_names if name != forgotten)
    env_dir = _stage_file(tmp_path, "dev", {"QUEUE_NAMES": kept})
    with pytest.raises(
        ConfigError, match=rf"\.env\.dev: kinds \['{forgotten}'\] are declared .* stage 'dev'"
    ):
        load_stage_config("dev", env_dir=env_dir)


def test_skipping_it_on_purpose_is_accepted(tmp_path: Path) -> None:
    env_dir = _stage_file(tmp_path, "dev", {"QUEUE_NAMES": "summary", "SKIP_KINDS": ";".join(
        name for name in QUEUED if name != "summary"
    )})  # fmt: skip
    assert load_stage_config("dev", env_dir=env_dir).queue_names == ("summary",)


@pytest.mark.parametrize(
    ("skip", "message"),
    [
        ("summary;no-such-kind", r"SKIP_KINDS names kinds that are not declared .*\['no-such-kind'\]"),
        ("summary", r"kinds \['summary'\] are both in QUEUE_NAMES and in SKIP_KINDS"),
    ],
)
def test_a_skip_list_that_names_no_declared_kind_or_a_deployed_one_is_an_error(
    tmp_path: Path, skip: str, message: str
) -> None:
    config = load_stage_config("dev")
    skipped = ";".join([*config.skip_kinds, skip])
    with pytest.raises(ConfigError, match=message):
        load_stage_config("dev", env_dir=_stage_file(tmp_path, "dev", {"SKIP_KINDS": skipped}))


def test_a_narrower_queue_list_given_at_synth_is_a_deliberate_choice() -> None:
    assert load_stage_config("dev", {"QUEUE_NAMES": "summary"}).queue_names == ("summary",)


def test_a_stage_entry_naming_no_declared_kind_is_an_error(tmp_path: Path) -> None:
    env_dir = _stage_file(tmp_path, "dev", {"QUEUE_NAMES": "summary;no-such-kind"})
    with pytest.raises(ConfigError, match=r"QUEUE_NAMES \['no-such-kind'\] are neither declared kinds"):
        load_stage_config("dev", env_dir=env_dir)
