"""The local stack: the whole system on one machine, no AWS account and no Docker (`aijobs dev`).

moto in a process of its own (moto_server), the stage's resources made as the CDK stack makes them
(resources), the HTTP API in front of the producer (gateway, api_containers), the SQS event-source
mapping emulator (esm), the stack that wires them together (stack), and the files `sam local invoke`
runs with (sam_env, sample_events).
"""
