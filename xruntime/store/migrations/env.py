"""Alembic's environment: the revisions run on the connection the caller passes in
``config.attributes["connection"]`` (the store's, in its transaction and under its
lock: ``store.schema_versions``), never on one of their own."""

from alembic import context

from xruntime.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():  # (none of its own: the connection is in the caller's)
    context.run_migrations()
