"""Workflows: one job split into child jobs of another kind, then merged (docs/design.md §9).

A workflow kind is a queue like any other (`QUEUE_NAMES`); its consumer runs the parent's steps
(split -> wait for children -> merge, see runner.py) and its children run on their own kind's
queue as ordinary jobs. Register a workflow in registry.py (WORKFLOWS).
"""
