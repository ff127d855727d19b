"""Scheduled jobs: SCHEDULED_HANDLERS (registry.py) keyed by the exact CRONS expression."""
