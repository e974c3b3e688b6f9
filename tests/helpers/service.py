"""A real uvicorn server on 127.0.0.1 (a free port) in a thread, and API keys for it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
