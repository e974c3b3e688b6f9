"""Alembic environment. ctxledger runs migrations programmatically (``Ledger.open``) and
passes its own connection in ``config.attributes["connection"]``."""

from __future__ import annotations

from alembic import context

config = context.config


def _target_metadata():  # type: ignore[no-untyped-def]
    # Imported lazily: only autogenerate needs the live table definitions.
    import sqlalchemy as sa

    import ctxledger.projections.registry  # noqa: F401  (registers every projection table)
    from ctxledger.projections.base import metadata as projection_metadata
    from ctxledger.store.schema import metadata as store_metadata

    merged = sa.MetaData()
    for md in (store_metadata, projection_metadata):
        for table in md.tables.values():
            table.to_metadata(merged)
    return merged


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        from ctxledger.store.sql_engine import create_engine

        engine = create_engine(config.get_main_option("sqlalchemy.url"))
        with engine.begin() as conn:
            _run(conn)
        return
    _run(connection)


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=_target_metadata(),
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("ctxledger migrations run online only")
run_migrations_online()
