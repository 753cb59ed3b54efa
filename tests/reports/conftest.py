import pytest

from tests.reports import fleet


@pytest.fixture(scope="session")
def fleet_db(tmp_path_factory):
    """A real warehouse built from real shards (see fleet.py); shared read-only by the tests."""
    return fleet.build_warehouse(tmp_path_factory.mktemp("fleet"))


@pytest.fixture
def fleet_regressions():
    return fleet.regressions()


@pytest.fixture
def receiver():
    """A real threaded HTTP server on 127.0.0.1 (see receiver.py)."""
    from tests.reports import receiver as rmod

    rec = rmod.start()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()
