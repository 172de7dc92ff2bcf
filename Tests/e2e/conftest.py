import pytest

from harness import Broker, Desktop, IdP


@pytest.fixture(scope="session")
def idp():
    """One real glewlwyd for the whole run (tests that stop or slow it start their own)."""
    provider = IdP()
    yield provider
    provider.cleanup()


@pytest.fixture
def desktop():
    session = Desktop()
    yield session
    session.cleanup()


@pytest.fixture
def broker(desktop, idp):
    daemon = Broker(desktop, idp)
    yield daemon
    daemon.stop()


# Run at the end, in this order (the others keep theirs): the package's tests, whose `make deb`
# goes on from the release build that `make test` runs behind the tests (scripts/behind), so that
# it has the whole run to get far in; then the log check, which reads what every other test left.
LAST = ["test_package", "test_no_secrets_in_logs"]


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: LAST.index(item.module.__name__) + 1 if item.module.__name__ in LAST else 0)
