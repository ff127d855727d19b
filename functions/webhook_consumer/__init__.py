"""Webhook consumer Lambda."""
