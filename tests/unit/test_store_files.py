"""The SQLite database holds every user's requests and results: the server keeps its
file to its own user (benchmarks/abuse.py, item 9: it was 0644 in a 0755 folder)."""

import os
import stat

from xruntime.store import open_store


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_database_and_its_folder_are_private(tmp_path):
    path = tmp_path / "data" / "xruntime.db"
    store = open_store(f"sqlite:///{path}")
    try:
        assert mode(path.parent) & 0o077 == 0
        assert mode(path) == 0o600
        for sibling in path.parent.iterdir():  # the WAL and its index, once written
            assert mode(sibling) & 0o077 == 0, sibling
    finally:
        store.engine.dispose()


def test_an_existing_readable_database_is_made_private(tmp_path):
    path = tmp_path / "xruntime.db"
    path.touch()
    os.chmod(path, 0o644)
    store = open_store(f"sqlite:///{path}")
    try:
        assert mode(path) == 0o600
    finally:
        store.engine.dispose()
