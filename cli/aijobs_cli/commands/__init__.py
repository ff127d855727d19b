"""The `aijobs` commands, one module per purpose; aijobs_cli.main registers them on the app."""
