"""The job store's schema versions, as Alembic revisions (``store.schema_versions``
applies them; ``xruntime db`` shows and applies them by hand).

``versions/0001_baseline.py`` is the schema of the last release without versions (every
database made before is brought to it by ``store.migrate``); each later change of the
schema is a revision of its own, with ``keeps_older_nodes`` saying whether a node of the
release before can still use the database once it is applied (docs/operations.md,
"Upgrading").  A new revision: ``alembic -c xruntime/store/migrations/alembic.ini
revision -m "what it changes"``, then write its ``upgrade`` by hand (and set
``keeps_older_nodes``); ``tests/unit/test_schema_versions.py`` checks that a database
upgraded through every revision has the schema ``schema.metadata`` makes.  A database
made before versions gets the baseline's missing tables from today's ``metadata``, so
a revision that changes a baseline table checks first whether it is done already
(``0002`` does for its table).
"""
