"""HTTP API Lambda."""
