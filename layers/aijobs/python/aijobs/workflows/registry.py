"""WORKFLOWS: the workflow kind -> its definition. Register new workflows here (and add the kind to
QUEUE_NAMES next to its child kind; `cdk synth` refuses a workflow whose child kind is missing)."""

from __future__ import annotations

from aijobs.workflows import embedding_batch, image_batch, report
from aijobs.workflows.base import Workflow

WORKFLOWS: dict[str, Workflow] = {
    workflow.kind: workflow for workflow in (report.WORKFLOW, embedding_batch.WORKFLOW, image_batch.WORKFLOW)
}


def workflow_children() -> dict[str, str]:
    """Workflow kind -> child kind (what the stage config and the CDK grants need)."""
    return {kind: workflow.child_kind for kind, workflow in WORKFLOWS.items()}
