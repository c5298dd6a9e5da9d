import pytest

from tests.harness import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One real node for a test module (SQLite, 2 workers)."""
    srv = Server(str(tmp_path_factory.mktemp("node"))).start()
    yield srv
    srv.stop()


@pytest.fixture
def fresh_server(tmp_path):
    """A node of the test's own, for tests that restart or kill it."""
    servers = []

    def make(**kwargs):
        srv = Server(str(tmp_path / "node"), **kwargs)
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        if srv.proc is not None:
            srv.kill()
