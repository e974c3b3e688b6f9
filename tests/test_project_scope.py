"""The project scope and per-user database of the coding-agent surfaces."""

from __future__ import annotations

import os
from pathlib import Path

from ctxledger._project import default_db_url, project_scope, user_data_dir


def test_scope_is_stable_and_names_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "My Project"
    folder.mkdir()
    scope = project_scope(folder, environ={})
    assert scope.startswith("my-project-")
    assert project_scope(str(folder) + os.sep, environ={}) == scope
    link = tmp_path / "link"
    link.symlink_to(folder)
    assert project_scope(link, environ={}) == scope


def test_same_name_elsewhere_is_another_scope(tmp_path: Path) -> None:
    (tmp_path / "a" / "app").mkdir(parents=True)
    (tmp_path / "b" / "app").mkdir(parents=True)
    first = project_scope(tmp_path / "a" / "app", environ={})
    second = project_scope(tmp_path / "b" / "app", environ={})
    assert first != second
    assert first.startswith("app-") and second.startswith("app-")


def test_environment_overrides_the_scope(tmp_path: Path) -> None:
    assert project_scope(tmp_path, environ={"CTXLEDGER_SCOPE": " team-x "}) == "team-x"


def test_database_defaults_to_the_user_data_folder(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    assert user_data_dir(env) == tmp_path / "data" / "ctxledger"
    url = default_db_url(tmp_path, environ=env)
    assert url == f"sqlite:///{tmp_path / 'data' / 'ctxledger' / 'ledger.db'}"
    assert (tmp_path / "data" / "ctxledger").is_dir()
    assert default_db_url(tmp_path, environ={"CTXLEDGER_DB": "sqlite:///x.db"}) \
        == "sqlite:///x.db"


def test_a_project_database_comes_before_the_user_one(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    (tmp_path / "ctxledger.db").write_bytes(b"")
    assert default_db_url(tmp_path, environ=env) == f"sqlite:///{tmp_path / 'ctxledger.db'}"
    # The environment still wins over the project's file.
    assert default_db_url(tmp_path, environ={**env, "CTXLEDGER_DB": "sqlite:///x.db"}) \
        == "sqlite:///x.db"
