"""``ctxledger keys create|list|revoke`` through the real Typer app, on SQLite and
PostgreSQL: the token is printed once, only its hash is stored, revoking forgets it."""

from __future__ import annotations

import hashlib
import json
import threading

import pytest
import sqlalchemy as sa
from helpers.assertions import one_error_line
from typer.testing import CliRunner

from ctxledger._config import ENV_VAR
from ctxledger._service.keys import verify_token
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.store.sql_engine import create_engine


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})


def test_create_list_revoke(runner: CliRunner, db_url: str) -> None:
    made = runner.invoke(app, ["--db", db_url, "keys", "create", "--scope", "a",
                               "--scope", "b", "--scope", "a", "--read-only"])
    assert made.exit_code == 0, made.stderr
    created = json.loads(made.stdout)
    token = created["token"]
    key_id = created["key_id"]
    assert token.startswith(f"ctxl_{key_id}_")
    assert created["scopes"] == ["a", "b"] and created["read_only"] is True
    assert created["admin"] is False and created["revoked_at"] is None
    admin = json.loads(runner.invoke(app, ["keys", "create", "--admin", "--db", db_url])
                       .stdout)
    assert admin["admin"] is True and admin["scopes"] == []

    secret = token.split("_", 2)[2]
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            stored = conn.exec_driver_sql("SELECT * FROM api_keys").all()
        assert secret not in repr(stored) and token not in repr(stored)
        assert hashlib.sha256(secret.encode()).hexdigest() in repr(stored)
        found = verify_token(engine, token)
        assert found is not None and found.key_id == key_id and found.read_only

        listed = runner.invoke(app, ["keys", "list", "--db", db_url])
        records = [json.loads(line) for line in listed.stdout.splitlines()]
        assert {r["key_id"] for r in records} == {key_id, admin["key_id"]}
        assert all("token" not in r and "secret_hash" not in r for r in records)
        assert secret not in listed.stdout

        revoked = runner.invoke(app, ["keys", "revoke", key_id, "--db", db_url])
        assert revoked.exit_code == 0 and json.loads(revoked.stdout)["revoked_at"]
        assert verify_token(engine, token) is None
        with engine.connect() as conn:
            left = conn.execute(sa.text("SELECT secret_hash FROM api_keys WHERE key_id = :k"),
                                {"k": key_id}).scalar_one()
        assert left is None  # the hash is forgotten
        again = runner.invoke(app, ["keys", "revoke", key_id, "--db", db_url])
        assert json.loads(again.stdout)["revoked_at"] == json.loads(revoked.stdout)[
            "revoked_at"]
        text = runner.invoke(app, ["keys", "list", "--format", "text", "--db", db_url])
        assert f"{key_id} read-only scopes=a,b" in text.stdout and "revoked" in text.stdout
    finally:
        engine.dispose()


def test_bad_key_commands_are_one_line(runner: CliRunner, db_url: str,
                                       sqlite_url: str) -> None:
    one_error_line(runner.invoke(app, ["keys", "create", "--db", db_url]),
                   "at least one scope")
    one_error_line(runner.invoke(app, ["keys", "create", "--scope", " ", "--db", db_url]),
                   "scope must be")
    runner.invoke(app, ["keys", "create", "--scope", "a", "--db", db_url])
    one_error_line(runner.invoke(app, ["keys", "revoke", "nope", "--db", db_url]),
                   "unknown key 'nope'")
    one_error_line(runner.invoke(app, ["keys", "list", "--db", sqlite_url + "-none"]),
                   "no ctxledger database")


def test_a_key_is_checked_while_a_writer_holds_the_database(runner: CliRunner,
                                                             db_url: str) -> None:
    # A key check only reads: it must not wait for a write transaction's lock (SQLite's
    # busy timeout is 30 s) nor take it, or every request queues behind the appends.
    made = runner.invoke(app, ["--db", db_url, "keys", "create", "--scope", "a"])
    token = json.loads(made.stdout)["token"]
    engine = create_engine(db_url)
    found: list[object] = []
    try:
        with engine.begin() as writer:
            writer.execute(sa.text("UPDATE api_keys SET scopes = scopes WHERE 1 = 0"))
            checker = threading.Thread(target=lambda: found.append(verify_token(engine,
                                                                                token)),
                                       daemon=True)
            checker.start()
            checker.join(5.0)
            assert found, "the key check waited for the writer"
        key = found[0]
        assert key is not None and getattr(key, "scopes", None) == ("a",)
    finally:
        engine.dispose()
