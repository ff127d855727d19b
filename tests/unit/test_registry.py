"""Every configured queue has a handler; the registry is keyed by queue name."""

from __future__ import annotations

import pytest

from aijobs.consumer.registry import QUEUE_HANDLERS
from aijobs_cdk.stage import load_stage_config


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_every_configured_queue_has_a_registered_handler(stage: str) -> None:
    config = load_stage_config(stage)
    missing = [name for name in config.queue_names if name not in QUEUE_HANDLERS]
    assert missing == [], f"add handlers to aijobs/consumer/registry.py for {missing}"


def test_registry_covers_the_documented_kinds() -> None:
    assert {
        "summary",
        "embedding",
        "image-generate",
        "image-caption",
        "tts-generate",
        "video-generate",
    } <= set(QUEUE_HANDLERS)


def test_each_registered_workflow_module_defines_its_kind_and_its_consumer_handler() -> None:
    from aijobs.workflows.registry import WORKFLOWS, workflow

    for kind in WORKFLOWS:
        definition = workflow(kind)
        assert definition is not None
        assert definition.kind == kind
        assert QUEUE_HANDLERS[kind].__name__ == f"workflow_{kind.replace('-', '_')}"
    assert workflow("summary") is None
