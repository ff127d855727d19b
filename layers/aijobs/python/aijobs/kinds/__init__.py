"""Job kinds: one module each (see base.py for what a kind declares, registry.py for how they are found)."""
