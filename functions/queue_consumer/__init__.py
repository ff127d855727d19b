"""Queue consumer Lambda."""
