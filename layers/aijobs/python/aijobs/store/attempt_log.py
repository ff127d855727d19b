"""The attempt log on a job row: each end of an attempt as one compact entry, bounded, added by the
transition's own update, and spelled out for the API; and the clipping of a row's error messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from aijobs.domain import Job, JobStatus
from aijobs.store.keys import iso

# The attempt log on the row (`Job.attempt_log`): its last entries, each a few dozen bytes, since
# every byte of a job row is paid on each of its writes and index entries (a first-try success stays
# under 1 KB, one write unit). Entries are stored with one-letter names and epoch milliseconds:
# `n` attempt, `o` outcome code, `t` end, `d` duration (the start is `t - d`), `e`/`m` error class
# and message; `attempt_history` spells them out.
ATTEMPT_LOG_SIZE = 20
_LOG_MESSAGE_CHARS = 160
_OUTCOME_CODES = {JobStatus.SUCCEEDED: "s", JobStatus.FAILED_RETRYABLE: "r", JobStatus.FAILED_FINAL: "f"}
_OUTCOMES = {code: status.value for status, code in _OUTCOME_CODES.items()}


def attempt_entry(
    job: Job, now: datetime, outcome: JobStatus, error_class: str | None = None, message: str | None = None
) -> dict[str, Any]:
    """One end of an attempt, as stored. Only a running job's claim started the attempt that ends
    here: a job finalized while it waited (dead-lettered, cancelled, by an operator) has no duration."""
    entry: dict[str, Any] = {"n": job.attempts, "o": _OUTCOME_CODES[outcome], "t": _epoch_ms(now)}
    if job.status is JobStatus.RUNNING and job.started_at is not None:
        entry["d"] = max(0, _epoch_ms(now) - _epoch_ms(job.started_at))
    if error_class is not None:
        entry["e"] = error_class
    if message is not None:
        entry["m"] = clip(message, _LOG_MESSAGE_CHARS)
    return entry


def attempt_history(log: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored attempt log spelled out, oldest first: `attempt`, `outcome` (a status), `endedAt`,
    and when known `startedAt`, `durationMs`, `errorClass`, `message` (ISO times)."""
    history = []
    for entry in log:
        ended = int(entry["t"])
        step: dict[str, Any] = {
            "attempt": int(entry["n"]),
            "outcome": _OUTCOMES.get(str(entry["o"]), str(entry["o"])),
            "endedAt": iso(_from_epoch_ms(ended)),
        }
        if "d" in entry:
            step["durationMs"] = int(entry["d"])
            step["startedAt"] = iso(_from_epoch_ms(ended - int(entry["d"])))
        if "e" in entry:
            step["errorClass"] = str(entry["e"])
        if "m" in entry:
            step["message"] = str(entry["m"])
        history.append(step)
    return history


def _epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _from_epoch_ms(milliseconds: int) -> datetime:
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC)


def attempt_log_update(
    job: Job, now: datetime, outcome: JobStatus, error_class: str | None = None, message: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(sets, values) adding one entry to the row's attempt log in the transition's own update.

    Under the bound the entry is appended (`list_append`: right whatever the row holds); at the
    bound the log is rewritten from `job`'s copy, its oldest entries dropped."""
    entry = attempt_entry(job, now, outcome, error_class, message)
    if len(job.attempt_log) < ATTEMPT_LOG_SIZE:
        expression = "list_append(if_not_exists(attempt_log, :no_log), :log_entry)"
        return {"attempt_log": (expression, None)}, {":no_log": [], ":log_entry": [entry]}
    return {"attempt_log": [*job.attempt_log[-(ATTEMPT_LOG_SIZE - 1) :], entry]}, {}


def clip(message: str, limit: int = 1000) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"
