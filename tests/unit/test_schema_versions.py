"""The job store's schema versions (issue 33; store/schema_versions.py, docs/operations.md
"Upgrading"), on SQLite and PostgreSQL: a new database is made at the head and marked
so; a database made before versions is brought to the baseline and upgraded, and then
has exactly the schema ``schema.metadata`` makes; a database a newer release upgraded
is used when that release lists this one among its readers, refused in one line when
not; with upgrades left to the command, a database behind the head is refused at start
with the command to run."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, delete, insert, inspect, text

from tests.unit.conftest import fresh_postgres_store
from xruntime.store import JobStore, schema_versions
from xruntime.store.schema import OWNER_SUM_INDEXES, metadata, schema_readers


def test_head_is_the_revisions_head_and_each_revision_says_what_older_nodes_can_do():
    script = schema_versions._script()
    assert script.get_current_head() == schema_versions.HEAD
    revisions = list(script.walk_revisions())
    assert revisions[-1].revision == schema_versions.BASELINE
    for revision in revisions:
        assert isinstance(revision.module.keeps_older_nodes, bool), revision.revision
        assert revision.doc, f"{revision.revision} says nothing of what it changes"


def reopened(store):
    """The same database, opened again (as a node that starts)."""
    url = store.engine.url.render_as_string(hide_password=False)
    store.close()
    return JobStore(url)


def version_and_readers(store):
    with store.engine.connect() as conn:
        readers = set(conn.execute(schema_readers.select()).scalars())
        return schema_versions.version_of(conn), readers


def test_a_new_database_is_made_at_the_head(any_store):
    version, readers = version_and_readers(any_store)
    assert version == schema_versions.HEAD
    assert readers == set(schema_versions.readers_of(schema_versions._script()))
    assert schema_versions.HEAD in readers
    with any_store.engine.connect() as conn:  # marked as Alembic itself reads it
        assert MigrationContext.configure(conn).get_current_revision() == schema_versions.HEAD


def test_the_heads_readers_are_the_revisions_readers():
    # (a new database is marked with them, without importing Alembic)
    assert list(schema_versions.HEAD_READERS) == schema_versions.readers_of(
        schema_versions._script()
    )


def version_table(path, make):
    """(columns, primary key) of the version table ``make(conn)`` makes in a new SQLite
    database at ``path``."""
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            make(conn)
            found = inspect(conn)
            columns = found.get_columns("alembic_version")
            shape = {(c["name"], str(c["type"]), c["nullable"]) for c in columns}
            return shape, found.get_pk_constraint("alembic_version")
    finally:
        engine.dispose()


def test_alembic_version_is_the_table_alembic_makes(tmp_path):
    alembic_made = version_table(
        tmp_path / "a.db", lambda conn: MigrationContext.configure(conn)._ensure_version_table()
    )
    ours = version_table(tmp_path / "b.db", schema_versions.alembic_version.create)
    assert ours == alembic_made


def test_a_database_made_before_versions_is_upgraded_to_exactly_the_schema(any_store):
    with any_store.engine.begin() as conn:  # as a node of the release before made it
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(text("DROP TABLE schema_readers"))
    store = reopened(any_store)
    try:
        assert version_and_readers(store)[0] == schema_versions.HEAD
        with store.engine.connect() as conn:
            differences = [
                difference
                for difference in compare_metadata(MigrationContext.configure(conn), metadata)
                # (SQLite's own tables beside the schema, made at every open: the feed's
                # members, the owners' stored bytes; and the indexes of the owners' sums,
                # which the schema makes on PostgreSQL alone, and Alembic's comparison
                # expects anyway)
                if not (
                    difference[0] == "remove_table"
                    and difference[1].name in ("feed_members", "owner_bytes")
                )
                and not (
                    difference[0] == "add_index"
                    and difference[1].name in OWNER_SUM_INDEXES
                    and conn.dialect.name == "sqlite"
                )
            ]
        assert differences == []
    finally:
        store.close()


def owner_sum_indexes(store):
    """The indexes of ``OWNER_SUM_INDEXES`` the database has."""
    with store.engine.connect() as conn:
        found = inspect(conn)
        names = {ix["name"] for table in ("jobs", "job_results") for ix in found.get_indexes(table)}
    return names & set(OWNER_SUM_INDEXES)


def test_the_owners_sums_are_indexed_on_postgresql_alone_and_an_sqlite_database_loses_them(
    any_store,
):
    """PostgreSQL sums an owner's stored bytes over three indexes; SQLite keeps a running
    total, and a database of the revision before, which has the three, loses them at the
    upgrade (only indexes: a node of that revision keeps working on it)."""
    on_sqlite = any_store.dialect == "sqlite"
    assert owner_sum_indexes(any_store) == (set() if on_sqlite else set(OWNER_SUM_INDEXES))
    if not on_sqlite:
        return
    with any_store.engine.begin() as conn:  # as a node of 0002_schema_readers left it
        conn.execute(text("CREATE INDEX ix_jobs_owner_bytes ON jobs (owner, stored_bytes)"))
        conn.execute(text("CREATE INDEX ix_jobs_owner_bound ON jobs (owner, status, result_bound)"))
        conn.execute(text("CREATE INDEX ix_job_results_owner_bytes ON job_results (owner, bytes)"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0002_schema_readers'"))
    assert owner_sum_indexes(any_store) == set(OWNER_SUM_INDEXES)
    store = reopened(any_store)
    try:
        assert version_and_readers(store)[0] == schema_versions.HEAD
        assert owner_sum_indexes(store) == set()
        assert "0002_schema_readers" in version_and_readers(store)[1]  # (it keeps them)
    finally:
        store.close()


def test_a_newer_database_is_used_when_it_lists_this_release_and_refused_when_not(any_store):
    with any_store.engine.begin() as conn:  # what a newer release's upgrade leaves
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
        conn.execute(insert(schema_readers), [{"revision": "0099_from_the_future"}])
    store = reopened(any_store)  # its head is among the readers: used as it is
    with store.engine.begin() as conn:
        assert "compatible" in schema_versions.check_at_start(conn, auto_upgrade=True)
        conn.execute(
            delete(schema_readers).where(schema_readers.c.revision != "0099_from_the_future")
        )
    url = store.engine.url.render_as_string(hide_password=False)
    store.close()
    with pytest.raises(schema_versions.SchemaTooNew) as caught:
        JobStore(url)
    message = str(caught.value)
    assert "0099_from_the_future" in message and schema_versions.HEAD in message
    assert "\n" not in message
    engine = create_engine(url)  # nothing was changed
    with engine.connect() as conn:
        assert schema_versions.version_of(conn) == "0099_from_the_future"
    engine.dispose()


def test_with_upgrades_left_to_the_command_an_older_database_is_refused_at_start(any_store):
    with any_store.engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
        with pytest.raises(schema_versions.UpgradeNeeded) as caught:
            schema_versions.check_at_start(conn, auto_upgrade=False)
        assert "xruntime db upgrade" in str(caught.value)
        assert "before versions" in schema_versions.check_at_start(conn, auto_upgrade=True)


def test_an_open_at_the_head_does_not_import_alembic(tmp_path):
    """Every HTTP process opens the store: at the head, one row is read, no Alembic."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path}/db"
    JobStore(url).close()
    code = (
        "import sys; from xruntime.store import JobStore; "
        f"JobStore({url!r}).close(); print('alembic' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stderr


def test_fresh_postgres_store_helper_still_gives_an_empty_store(tmp_path):
    """(The tests' own helper drops the tables and makes them: the version row it leaves
    behind names the head, and the store opens as new.)"""
    import os

    url = os.environ.get("XRUNTIME_TEST_DATABASE_URL")
    if not url:
        pytest.skip("XRUNTIME_TEST_DATABASE_URL is not set")
    store = fresh_postgres_store(url)
    try:
        assert version_and_readers(store)[0] == schema_versions.HEAD
        assert store.counts_by_status() == {}
    finally:
        store.close()
