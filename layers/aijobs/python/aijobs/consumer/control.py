"""Pausing and resuming a kind's consumer: `ConsumerControl` lives in aijobs.mappings, which the cron
dispatcher (adaptive concurrency) and the CLI use too; this name stays for the consumer's imports."""

from __future__ import annotations

from aijobs.mappings import ConsumerControl

__all__ = ["ConsumerControl"]
