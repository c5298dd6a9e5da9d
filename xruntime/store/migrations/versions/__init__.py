"""The revisions, one module each (Alembic's ``versions`` folder)."""
