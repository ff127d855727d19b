"""moto's server in a process of its own, for the local stack.

moto answers every AWS call of the stack, and most of the stack's CPU is moto's: in the stack's own
interpreter, its request handling and the functions' code took turns on one lock (the GIL), so one
core did everything. Here it has its own interpreter (a second core), with the speedups applied.

`MotoProcess` starts `python -m aijobs_cli.local.moto_server`, which binds a free loopback port (or the
one asked for), prints it on stdout once it accepts connections, and serves until its stdin closes.
The parent holds the other end of that pipe: stop() closes it, and so does the operating system when
the parent dies, however it dies (an orphaned moto stops by itself). The child ignores SIGINT:
Ctrl-C in a terminal reaches the whole process group, and the parent decides when moto stops.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from typing import IO

READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
SWITCH_INTERVAL_SECONDS = 0.001


class MotoProcessError(RuntimeError):
    """moto's process did not start (its exit status and what it printed are in the message)."""


class MotoProcess:
    """One moto server in a child process; `endpoint_url` is set once start() returns."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.endpoint_url = ""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self, timeout: float = READY_TIMEOUT_SECONDS) -> MotoProcess:
        self._process = subprocess.Popen(  # noqa: S603 - this interpreter, our own module
            [sys.executable, "-m", "aijobs_cli.local.moto_server", self.host, str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._process.stdout is not None
        try:
            line = _read_line(self._process.stdout, timeout)
            port = int(line)
        except (TimeoutError, ValueError) as error:
            self.stop()
            raise MotoProcessError(
                f"moto's server did not start (exit status {self._process.returncode}): {error}"
            ) from None
        self.port = port
        self.endpoint_url = f"http://{self.host}:{port}"
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Close the child's stdin (it shuts its server down and exits); kill it if it lingers."""
        process = self._process
        if process is None:
            return
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> MotoProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def _read_line(stream: IO[bytes], timeout: float) -> str:
    """One line from the child's stdout, or TimeoutError (the child died or hangs)."""
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
            raise TimeoutError(f"no port after {timeout:.0f} s")
        chunk = os.read(stream.fileno(), 64)
        if not chunk:
            raise TimeoutError("the process exited before it printed its port")
        data += chunk
    return data.decode().strip()


def serve(host: str, port: int) -> None:
    """The child: serve moto on (host, port) until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from moto.server import ThreadedMotoServer

    from aijobs_cli import moto_patches

    moto_patches.apply()  # dynamodb_request_isolation among them: DynamoDB requests take turns
    # One thread per connection: a request that waits to read or write gives up the interpreter
    # lock, and with the default 5 ms switch interval it waits that long to get it back from a
    # thread busy with another request. 1 ms took about 15-20% off the end-to-end time of
    # scripts/benchmark_local.py in A/B runs (same machine, same load).
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()  # bound and listening when it returns
    print(server.get_host_and_port()[1], flush=True)
    while sys.stdin.buffer.read(4096):  # nothing is sent: this waits for the parent to go
        pass
    server.stop()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
