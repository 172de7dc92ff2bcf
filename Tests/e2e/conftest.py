import json
import os
import sys
from pathlib import Path

import pytest

# As an activated virtual environment has it: the interpreter's directory first on PATH. The tests
# run `python3` as other uids too, and a pyenv shim found first on PATH cannot be run by them (as
# the pyenv interpreter that ran pytest before put its own directory first, this does).
os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"

from harness import ROOT, Broker, Desktop, IdP  # noqa: E402

# The Python library (clients/python), importable as `msso` by every test, as from its checkout.
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))


@pytest.fixture(scope="session")
def idp():
    """One real glewlwyd for the whole run (tests that stop or slow it start their own)."""
    provider = IdP()
    yield provider
    provider.cleanup()


@pytest.fixture(scope="session")
def django_providers():
    """django-oauth-toolkit and django-oidc-provider (one Django site), started once for the run."""
    from providers import DjangoProviders
    providers = DjangoProviders()
    yield providers
    providers.cleanup()


@pytest.fixture(scope="session")
def idpy_provider():
    """idpyoidc (behind a small Flask front), started once for the run."""
    from providers import IdpyProvider
    provider = IdpyProvider()
    yield provider
    provider.cleanup()


@pytest.fixture(scope="session")
def chromium():
    """One headless chromium (selenium, Debian's chromedriver) for every browser login of the run."""
    from providers import Chromium
    browser = Chromium()
    yield browser
    browser.cleanup()


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


def pytest_sessionfinish(session):
    """`make e2e` runs the tests in several processes, then LAST alone (Makefile): each process
    leaves the daemon logs it wrote and the secrets it handled in $MSSO_E2E_RECORDS (a directory
    only root reads, removed after the run) for the log check."""
    records = os.environ.get("MSSO_E2E_RECORDS")
    if not records:
        return
    from harness import LOGS, SECRETS
    path = Path(records) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.json"
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        json.dump({"logs": [str(log) for log in LOGS], "secrets": sorted(SECRETS)}, out)


@pytest.fixture(scope="module")
def api(idp):
    """A resource server that accepts only tokens the IdP says are active and checks each signing
    profile (Tests/e2e/api_server.py), for the client libraries' tests (a module may make its own)."""
    from api_server import APIServer
    from harness import SECRETS
    server = APIServer(idp)
    yield server
    SECRETS.update(server.seen)
    server.close()
