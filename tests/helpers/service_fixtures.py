"""Module-scoped served databases (one per backend) shared by the service tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from helpers.databases import module_database
from helpers.service import running_server

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@dataclass(frozen=True)
class Served:
    """A running server: its base URL and the database URL behind it."""

    base: str
    url: str


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A real uvicorn server over a fresh database of each backend, for the module."""
    with (module_database(request.param, tmp_path_factory.mktemp("serve")) as url,
          running_server(url) as base):
        yield Served(base=base, url=url)


def fresh(prefix: str) -> str:
    """A name no other test of the module uses (tests share the served database)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
