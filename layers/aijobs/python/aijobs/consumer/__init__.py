"""The queue consumer: QUEUE_HANDLERS (registry.py), the partial-batch dispatcher, retries."""
