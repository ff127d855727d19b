"""Back-off delays of the retry table (pure)."""

from __future__ import annotations

import random

import pytest

from aijobs.consumer.retry import RetryPolicy
from aijobs.errors import ThrottledError, TransientProviderError
from aijobs.queues import MAX_VISIBILITY_SECONDS


def _policy(seed: int = 7) -> RetryPolicy:
    return RetryPolicy(
        base_delay_seconds=10, max_delay_seconds=900, throttle_delay_seconds=60, rng=random.Random(seed)
    )


@pytest.mark.parametrize(
    ("attempt", "low", "high"), [(1, 5, 10), (2, 10, 20), (3, 20, 40), (7, 320, 640), (10, 450, 900)]
)
def test_transient_backoff_is_exponential_with_equal_jitter(attempt: int, low: int, high: int) -> None:
    delays = {_policy(seed).delay_seconds(TransientProviderError("503"), attempt) for seed in range(200)}
    assert min(delays) >= low
    assert max(delays) <= high
    assert len(delays) > 1  # jittered, not one value for everyone


def test_throttle_waits_longer_than_a_blip_and_doubles() -> None:
    policy = _policy()
    blip = max(policy.delay_seconds(TransientProviderError("503"), 1) for _ in range(50))
    assert policy.delay_seconds(ThrottledError("429"), 1) == 60 > blip
    assert policy.delay_seconds(ThrottledError("429"), 2) == 120


def test_retry_after_is_honoured_even_beyond_the_backoff() -> None:
    policy = _policy()
    assert policy.delay_seconds(ThrottledError("429", retry_after=2.2), 1) == 60
    assert policy.delay_seconds(ThrottledError("429", retry_after=1800), 1) == 1800
    assert policy.delay_seconds(ThrottledError("429", retry_after=10**9), 1) == MAX_VISIBILITY_SECONDS


def test_zero_delays_for_a_fast_local_stage() -> None:
    policy = RetryPolicy(base_delay_seconds=0, max_delay_seconds=900, throttle_delay_seconds=0)
    assert policy.delay_seconds(TransientProviderError("503"), 3) == 0
    assert policy.delay_seconds(ThrottledError("429", retry_after=1.0), 1) == 1
