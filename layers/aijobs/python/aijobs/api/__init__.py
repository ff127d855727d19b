"""The HTTP API (producer): routes in app.py, request/response models in schemas.py, logic in service.py."""
