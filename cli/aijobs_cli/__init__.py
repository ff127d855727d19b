"""Developer and operator tooling: the SQS mapping emulator, the local stack, the `aijobs` CLI.

Not part of the Lambda layer: nothing here runs in AWS.
"""
