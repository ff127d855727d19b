"""The job rows of one tenant shard: `JobStore`, the one class callers use, composed of its parts
(creation, queries, transitions, a workflow's rows), each in its own module of aijobs.store.
"""

from __future__ import annotations

from aijobs.store.job_creation import JobCreation
from aijobs.store.job_queries import JobQueries
from aijobs.store.job_transitions import JobTransitions
from aijobs.store.workflow_rows import WorkflowRows


class JobStore(JobCreation, JobQueries, JobTransitions, WorkflowRows):
    """Job rows of one shard table (`USER#<userId>` / `JOB#<jobId>`, see TABLES.md)."""
