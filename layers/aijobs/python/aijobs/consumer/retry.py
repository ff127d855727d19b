"""How long a failed attempt waits before the next one (docs/design.md §4, the retry table)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from aijobs.errors import ProviderError, ThrottledError
from aijobs.queues import MAX_VISIBILITY_SECONDS


@dataclass(frozen=True)
class RetryPolicy:
    base_delay_seconds: int
    max_delay_seconds: int
    throttle_delay_seconds: int
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay_seconds(self, error: ProviderError, attempt: int) -> int:
        """Seconds until the message may be received again, after failed attempt number `attempt`."""
        if isinstance(error, ThrottledError):
            # Throttles back off longer than blips and never retry before the provider's Retry-After.
            backoff = min(self.max_delay_seconds, self.throttle_delay_seconds * (1 << max(0, attempt - 1)))
            wanted = max(float(backoff), error.retry_after or 0.0)
            return min(MAX_VISIBILITY_SECONDS, math.ceil(wanted))
        # Exponential back-off with "equal jitter": half the step fixed, half random, so a burst of
        # failures does not come back at the same moment.
        ceiling = min(self.max_delay_seconds, self.base_delay_seconds * (1 << max(0, attempt - 1)))
        return math.ceil(ceiling / 2 + self.rng.uniform(0, ceiling / 2))
