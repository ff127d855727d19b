"""Dead-letter consumer Lambda."""
