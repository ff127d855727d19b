"""Cron dispatcher Lambda."""
