"""Counting provider runs (local stack only): every consumer the local stack builds gets its provider
wrapped, so the soak knows how often each job's provider ran and how each run ended."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, cast

from aijobs import runtime
from aijobs.consumer.attempts import Consumer
from aijobs.domain import utcnow
from aijobs.providers.base import (
    EmbeddingRequest,
    EmbeddingResult,
    ImageRequest,
    ImageResult,
    Provider,
    ProviderResult,
    SpeechRequest,
    TextRequest,
    TextResult,
    VideoRequest,
)
from aijobs.providers.local_directives import SimulatedCrash
from aijobs.settings import ConsumerSettings
from aijobs_cli.soak.workload import SUCCEEDED


class ProviderRuns:
    """Provider calls per job and how they ended, across every consumer thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        # The cost each successful call reported (USD), summed per job.
        self.costs: dict[str, float] = defaultdict(float)

    def record(self, job_id: str, outcome: str, cost: float | None = None) -> None:
        with self._lock:
            self.calls[job_id] += 1
            if outcome == SUCCEEDED:
                self.successes[job_id] += 1
                self.costs[job_id] += cost or 0.0
            elif outcome == "crash":
                self.crashes[job_id] += 1


class CountingProvider:
    """Wraps a consumer's provider: every run is counted per job, with its outcome."""

    def __init__(self, inner: Provider, runs: ProviderRuns) -> None:
        self.name = inner.name
        self.capabilities = inner.capabilities
        self._inner = inner
        self._runs = runs

    def _counted(self, method: str, request: Any) -> Any:
        job_id = request.call.job_id
        try:
            result = getattr(self._inner, method)(request)
        except SimulatedCrash:
            self._runs.record(job_id, "crash")
            raise
        except Exception:
            self._runs.record(job_id, "error")
            raise
        self._runs.record(job_id, getattr(result, "status", "succeeded"), getattr(result, "cost", None))
        return result

    def generate_text(self, request: TextRequest) -> TextResult:
        return cast(TextResult, self._counted("generate_text", request))

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        return cast(EmbeddingResult, self._counted("embed", request))

    def generate_image(self, request: ImageRequest) -> ImageResult:
        return cast(ImageResult, self._counted("generate_image", request))

    def synthesize_speech(self, request: SpeechRequest) -> ProviderResult:
        return cast(ProviderResult, self._counted("synthesize_speech", request))

    def start_video(self, request: VideoRequest) -> ProviderResult:
        return cast(ProviderResult, self._counted("start_video", request))

    def check_video(self, request: VideoRequest) -> ProviderResult:
        return cast(ProviderResult, self._counted("check_video", request))


@contextmanager
def counting_consumers(runs: ProviderRuns) -> Iterator[None]:
    """Every consumer the local stack builds meanwhile gets its provider wrapped."""
    original = runtime.build_consumer

    def build(settings: ConsumerSettings, clock: Callable[[], datetime] = utcnow) -> Consumer:
        consumer = original(settings, clock)
        consumer.provider = CountingProvider(consumer.provider, runs)
        return consumer

    runtime.build_consumer = build
    try:
        yield
    finally:
        runtime.build_consumer = original


# --- where the soak runs ------------------------------------------------------------------------
