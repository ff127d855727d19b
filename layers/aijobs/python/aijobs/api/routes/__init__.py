"""The API's routes: one powertools `Router` per route group, included by `aijobs.api.app`."""
