"""A real uvicorn server on 127.0.0.1 (a free port) in a thread, and API keys for it."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from ctxledger import Ledger
from ctxledger._service.app import create_app
from ctxledger._service.keys import create_key

STARTUP_WAIT = 60.0  # generous: a loaded machine; the test never times anything


@contextmanager
def running_server(url: str, **settings: Any) -> Iterator[str]:
    """Serve ``url`` with ``create_app(url, **settings)``; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(url, **settings), log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_WAIT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(STARTUP_WAIT)
        sock.close()


def make_key(url: str, scopes: Sequence[str] = (), **rights: bool) -> str:
    """Create a key in the database at ``url``; returns its token."""
    with Ledger.open(url, load_vocabulary=False) as ledger:
        return create_key(ledger.engine, scopes, **rights)[1]


def client(base: str, token: str | None = None) -> httpx.Client:
    """An httpx client for ``base``, sending ``token`` as the bearer key."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.Client(base_url=base, headers=headers, timeout=120.0)


def free_port() -> int:
    """A TCP port nothing listens on now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


CTXLEDGER_BIN = str(Path(sys.executable).parent / "ctxledger")


class ServeProcess:
    """``ctxledger serve`` in a child process of its own, as a deployment runs it."""

    def __init__(self, url: str, *args: str) -> None:
        self.url = url
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [CTXLEDGER_BIN, "--db", url, "serve", "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + STARTUP_WAIT
        while True:
            if self.proc.poll() is not None:
                assert self.proc.stderr is not None
                raise RuntimeError(f"ctxledger serve exited: {self.proc.stderr.read()}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("ctxledger serve did not start")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush; what a crash or the OOM killer does."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(STARTUP_WAIT)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def stop(self) -> None:
        """SIGTERM, as a process manager stops it; waits for it to exit."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(STARTUP_WAIT)
        finally:
            self.kill()


@contextmanager
def serve_process(url: str, *args: str) -> Iterator[ServeProcess]:
    """A running ``ctxledger serve`` process over ``url``, stopped at the end."""
    served = ServeProcess(url, *args)
    try:
        yield served
    finally:
        served.stop()
