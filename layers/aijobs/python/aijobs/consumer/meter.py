"""The consumer's throttle meter: attempts and throttled attempts of its kind, counted in memory and
flushed to the kind's per-minute counter (aijobs.store.throttle_counts) for the adaptive concurrency cron.

A flush is one `UpdateItem` at the end of a batch that saw a throttle (the controller should see a
429 storm within the minute), otherwise at most every FLUSH_INTERVAL, so a busy consumer spends a
fraction of a call per job on it. Counting is best effort: a failed flush keeps its counts for the
next one and never fails a batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from aijobs.observability import logger
from aijobs.store.throttle_counts import ThrottleCounts

FLUSH_INTERVAL = timedelta(seconds=30)


class ThrottleMeter:
    def __init__(self, records: ThrottleCounts, kind: str, clock: Callable[[], datetime]) -> None:
        self._records = records
        self._kind = kind
        self._clock = clock
        # One id per container: the controller counts the instances that ran in its window.
        self.instance = uuid.uuid4().hex[:12]
        self.attempts = 0
        self.throttled = 0
        # A new container waits a full interval too: its first jobs cost no extra call.
        self._flushed_at = clock()

    def count(self) -> None:
        """One attempt started (a provider call)."""
        self.attempts += 1

    def count_throttle(self) -> None:
        """The attempt just counted was throttled (a 429 / out of capacity, aijobs.errors.ThrottledError)."""
        self.throttled += 1

    def flush(self) -> None:
        """Write the pending counts when due: a throttle is pending, or FLUSH_INTERVAL passed."""
        if not self.attempts:
            return
        now = self._clock()
        if not self.throttled and now - self._flushed_at < FLUSH_INTERVAL:
            return
        try:
            self._records.add(
                self._kind, now, attempts=self.attempts, throttled=self.throttled, instance=self.instance
            )
        except Exception:
            logger.exception("could not record throttle counters; kept for the next flush")
            return
        self.attempts = self.throttled = 0
        self._flushed_at = now
