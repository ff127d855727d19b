"""WORKFLOWS: the workflow kind -> the module of aijobs.workflows that defines it (its `WORKFLOW`).
Register new workflows here (and add the kind to QUEUE_NAMES next to its child kind; `cdk synth`
refuses a workflow whose child kind is missing).

A definition is imported on first use (`workflow(kind)`): a consumer of another kind, or an API
request for another kind, never loads workflow code.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aijobs.workflows.base import Workflow

WORKFLOWS: dict[str, str] = {
    "report": "report",
    "embedding-batch": "embedding_batch",
    "image-batch": "image_batch",
}


def workflow(kind: str) -> Workflow | None:
    """The definition of workflow `kind`; None for a kind that is not a workflow."""
    module = WORKFLOWS.get(kind)
    if module is None:
        return None
    definition: Workflow = import_module(f"aijobs.workflows.{module}").WORKFLOW
    return definition


def workflow_children() -> dict[str, str]:
    """Workflow kind -> child kind (what the stage config and the CDK grants need)."""
    return {kind: definition.child_kind for kind in WORKFLOWS if (definition := workflow(kind))}
