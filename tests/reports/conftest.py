import pytest

from tests.reports import fleet


@pytest.fixture(scope="session")
def fleet_db(tmp_path_factory):
    """A real warehouse built from real shards (see fleet.py); shared read-only by the tests."""
    return fleet.build_warehouse(tmp_path_factory.mktemp("fleet"))


@pytest.fixture
def fleet_regressions():
    return fleet.regressions()
