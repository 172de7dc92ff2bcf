"""Several accounts per group, through every client library and helper, against the real daemon,
keyring and glewlwyd: alice is logged in as the group's default account and bob as its account
"admin" (`msso login --account admin`). Each library or helper asking as "admin" is handed bob's
token and, naming no account, alice's, whose each is by the IdP's own introspection; and
MSSO_ACCOUNT=admin in a program's environment chooses bob's for each one that reads it: Python
(msso.Client, msso.aio.Client), Go (the module's Client option, a request's, WithAccount,
TokenSource, Transport), docker's and cargo's credential helpers, libmsso (msso_set_account),
Swift (SSOClient, in the example suite's App1), git-credential-msso and kubectl's exec plugin
(`msso token --format kubernetes --account admin`)."""
import json
import subprocess
import sys

import pytest

import msso
import msso.aio
from harness import BIN, GROUP, PASSWORDS, ROOT, SECRETS, Broker, Desktop
from test_c_library import DRIVER, PROGRAMS, Driver, bearer, failure
from test_c_library import built as c_built  # noqa: F401 (a fixture: libmsso and its driver, built)
from test_go_library import built as go_built  # noqa: F401 (a fixture: the Go test binary and docker's helper)
from test_go_library import go, go_test
from test_tools import KUBECTL, kubeconfig
from token_server import TokenServer

REGISTRY = "registry.example.com"
CRATES = {"index-url": "sparse+https://crates.example.com/index/", "name": "example"}


def whose(idp, token):
    """The user the IdP says the token is for (it must be active)."""
    SECRETS.add(token)
    said = idp.introspect(token)
    assert said.get("active"), said
    return said["username"]


@pytest.fixture(scope="module")
def cargo_provider(go_built):  # noqa: F811
    """cargo's credential provider, built beside the Go test binary."""
    go("build", "-o", go_built.dir / "cargo-credential-msso", "./cmd/cargo-credential-msso")
    return go_built.dir / "cargo-credential-msso"


@pytest.fixture(scope="module")
def broker(idp, go_built, c_built, cargo_provider):  # noqa: F811
    """One group, alice in its default account and bob in "admin"; every program here registered."""
    desktop = Desktop()
    daemon = Broker(desktop, idp, start=False)
    daemon.register("account-clients", [go_built.tests, go_built.helper, cargo_provider, *PROGRAMS,
                                        BIN / "git-credential-msso"], [GROUP])
    daemon.start()
    assert daemon.login("alice").returncode == 0
    bob = daemon.msso("login", "--account", "admin", "--username", "bob", "--password-stdin", input=PASSWORDS["bob"] + "\n")
    assert bob.returncode == 0, bob.stderr
    yield daemon
    daemon.stop()
    desktop.cleanup()


def as_admin(daemon):
    return dict(daemon.env, MSSO_ACCOUNT="admin")


def test_the_sessions_name_their_accounts(broker):
    every = json.loads(broker.msso("status", "--json").stdout)["groups"]
    assert [(s["account"], s["username"], s.get("isDefault", False)) for s in every] == [("default", "alice", True),
                                                                                           ("admin", "bob", False)]


# -- Python ----------------------------------------------------------------------------------------

PYTHON_AS_ENVIRONMENT_SAYS = """
import asyncio, json, msso, msso.aio
async def aio():
    async with msso.aio.Client() as broker:
        return broker.account, (await broker.token()).access_token
with msso.Client() as broker:
    sync = broker.account, broker.token().access_token, broker.token(account="default").access_token
print(json.dumps([sync, asyncio.run(aio())]))
"""


def test_python_acts_as_the_clients_or_the_calls_account_and_reads_msso_account(broker, idp):
    with msso.Client(broker.socket) as plain, msso.Client(broker.socket, account="admin") as admin:
        assert plain.account is None and admin.account == "admin"
        assert whose(idp, plain.token().access_token) == "alice"
        assert whose(idp, admin.token().access_token) == "bob"
        assert whose(idp, plain.token(account="admin").access_token) == "bob"
        assert whose(idp, admin.token(account="default").access_token) == "alice"
        (name, value), = admin.sign("GET", "https://api.example.com/items")
        assert name == "Authorization" and whose(idp, value.removeprefix("Bearer ")) == "bob"
        assert (admin.check()["account"], admin.check()["username"]) == ("admin", "bob")
        assert [s["account"] for s in admin.status()] == ["default", "admin"], "status lists every account"
        assert [s["username"] for s in plain.status(GROUP, account="admin")] == ["bob"], "unless the call names one"

    async def aio():
        async with msso.aio.Client(broker.socket, account="admin") as client:
            return (await client.token()).access_token, (await client.token(account="default")).access_token
    admin_token, default_token = __import__("asyncio").run(aio())
    assert (whose(idp, admin_token), whose(idp, default_token)) == ("bob", "alice")

    # Another program, with MSSO_ACCOUNT=admin in its environment.
    done = subprocess.run([sys.executable, "-c", PYTHON_AS_ENVIRONMENT_SAYS], capture_output=True, text=True, timeout=30,
                          env=dict(as_admin(broker), PYTHONPATH=str(ROOT / "clients" / "python" / "src")))
    assert done.returncode == 0, done.stderr
    (account, token, default), (aio_account, aio_token) = json.loads(done.stdout)
    assert account == aio_account == "admin"
    assert [whose(idp, t) for t in (token, aio_token, default)] == ["bob", "bob", "alice"]


def test_a_python_subscription_hears_its_accounts_signals(broker):
    """Signals come in order on a connection: alice's extension, sent first, would be heard first."""
    with msso.Client(broker.socket, account="admin") as admin, msso.Client(broker.socket) as every:
        admin.subscribe()
        every.subscribe()
        assert broker.msso("extend").returncode == 0
        assert broker.msso("extend", "--account", "admin").returncode == 0
        heard = admin.next_event(timeout=10)
        assert (heard.name, heard.status["account"], heard.status["username"]) == ("Extended", "admin", "bob")
        assert [every.next_event(timeout=10).status["account"] for _ in range(2)] == ["default", "admin"]


# -- Go --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("environment", [{}, {"MSSO_ACCOUNT": "admin"}], ids=["plain", "MSSO_ACCOUNT=admin"])
def test_go_acts_as_the_clients_the_requests_or_a_views_account(broker, idp, api, go_built, tmp_path, environment):  # noqa: F811
    out = tmp_path / "tokens.json"
    go_test(broker, go_built, "TestAccountsChooseTheirSession", tmp_path, MSSO_E2E_ACCOUNTS_OUT=str(out),
            MSSO_E2E_API=api.url, **environment)
    users = {how: whose(idp, token) for how, token in json.loads(out.read_text()).items()}
    assert users == {"plain": "bob" if environment else "alice", "client admin": "bob", "request admin": "bob",
                     "request default": "alice", "view admin": "bob", "token source admin": "bob", "sign admin": "bob"}


def test_dockers_helper_takes_an_account(broker, idp, go_built):  # noqa: F811
    def secret(*argv, env=broker.env):
        done = subprocess.run([go_built.helper, *argv, "get"], input=REGISTRY, env=env, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stdout + done.stderr
        return whose(idp, json.loads(done.stdout)["Secret"])

    assert secret("--account", "admin") == "bob"
    assert secret() == "alice"
    assert secret(env=as_admin(broker)) == "bob"
    assert secret("--group", GROUP, "--account", "default", env=as_admin(broker)) == "alice"


def test_cargos_provider_takes_an_account_in_its_configuration(broker, idp, cargo_provider):
    def token(args, env=broker.env):
        request = {"v": 1, "registry": CRATES, "kind": "get", "operation": "read", "args": args}
        done = subprocess.run([cargo_provider, "--cargo-plugin"], input=json.dumps(request) + "\n", env=env,
                              capture_output=True, text=True, timeout=30)
        hello, answer = done.stdout.splitlines()
        assert json.loads(hello) == {"v": [1]}
        got = json.loads(answer)
        assert "Ok" in got, got
        return whose(idp, got["Ok"]["token"].removeprefix("Bearer "))

    assert token(["--group", GROUP, "--account", "admin"]) == "bob"
    assert token(["--group", GROUP]) == "alice"
    assert token([], env=as_admin(broker)) == "bob"


# -- C ---------------------------------------------------------------------------------------------

def test_libmsso_sets_the_account_per_handle_and_reads_msso_account(broker, idp):
    driver = Driver(broker.env)
    try:
        assert driver("account") == {"ok": True, "account": None}
        assert whose(idp, driver("token")["accessToken"]) == "alice"
        assert driver("account", "admin") == {"ok": True, "account": "admin"}
        assert whose(idp, driver("token")["accessToken"]) == "bob"
        assert whose(idp, bearer(driver("sign", "GET", "https://api.example.com/items")).removeprefix("Bearer ")) == "bob"
        assert driver("check")["session"]["username"] == "bob"
        # status lists every account whatever the handle's; their names are in its JSON.
        assert [s["username"] for s in driver("status")["sessions"]] == ["alice", "bob"]
        assert [s["account"] for s in driver("call", "status", "{}")["result"]["groups"]] == ["default", "admin"]
        failure(driver("account", "-admin"), "BadRequest", 64)
        assert driver("account") == {"ok": True, "account": "admin"}, "a refused name leaves the account as it was"
        assert driver("account", "-") == {"ok": True, "account": None}
        assert whose(idp, driver("token")["accessToken"]) == "alice"
    finally:
        driver.close()

    from_environment = Driver(as_admin(broker))
    try:
        assert from_environment("account") == {"ok": True, "account": "admin"}
        assert whose(idp, from_environment("token")["accessToken"]) == "bob"
    finally:
        from_environment.close()
    assert DRIVER.exists()


# -- Swift -----------------------------------------------------------------------------------------

def test_a_swift_app_signs_as_its_account(broker, api):
    def user(*argv, env=broker.env):
        done = subprocess.run([BIN / "App1", *argv, "fetch", f"{api.url}/swift"], env=env, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0 and " -> 200 " in done.stdout, done.stdout + done.stderr
        return json.loads(done.stdout.split(" -> 200 ", 1)[1])["user"]  # whose the API server's introspection says

    assert user("--account", "admin") == "bob"
    assert user() == "alice"
    assert user(env=as_admin(broker)) == "bob"
    assert user("--account", "default", env=as_admin(broker)) == "alice"


# -- git and kubectl ---------------------------------------------------------------------------------

def test_gits_helper_takes_the_account_from_its_option_the_environment_or_the_url(broker, idp):
    def password(*argv, username=None, env=broker.env):
        request = f"protocol=https\nhost=git.example.com\n{f'username={username}' + chr(10) if username else ''}\n"
        done = subprocess.run([BIN / "git-credential-msso", *argv, "get"], input=request, env=env, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return whose(idp, dict(line.split("=", 1) for line in done.stdout.splitlines())["password"])

    assert password("--account", "admin") == "bob"
    assert password() == "alice"
    assert password(env=as_admin(broker)) == "bob"
    assert password(username="admin") == "bob", "https://admin@git.example.com/…"


@pytest.mark.skipif(not KUBECTL.exists(), reason="Debian's kubectl is unpacked by scripts/setup")
def test_kubectls_exec_plugin_takes_an_account_in_the_kubeconfig(broker, idp, tmp_path):
    served = TokenServer(idp, tmp_path, tls=True)
    try:
        def users(account, env=broker.env):
            config = kubeconfig(tmp_path / f"kubeconfig-{account}", served)
            document = json.loads(config.read_text())
            if account:
                document["users"][0]["user"]["exec"]["args"] += ["--account", account]
            config.write_text(json.dumps(document))
            before = len(served.seen)
            listed = subprocess.run([KUBECTL, "get", "namespaces"], env=dict(env, KUBECONFIG=str(config), HOME=str(tmp_path)),
                                    capture_output=True, text=True, timeout=60)
            assert listed.returncode == 0 and "msso-test" in listed.stdout, listed.stderr
            return {whose(idp, token) for token in served.seen[before:]}

        assert users("admin") == {"bob"}
        assert users(None) == {"alice"}
        assert users(None, env=as_admin(broker)) == {"bob"}
    finally:
        SECRETS.update(served.seen)
        served.close()


# -- a login and a logout of one account, through the library --------------------------------------

def test_the_python_library_logs_an_account_in_and_out_naming_it(broker, idp):
    # Adding the account is the user's (msso login); an app then logs in to it by name.
    assert broker.login("bob", account="sandbox").returncode == 0
    with msso.Client(broker.socket, account="sandbox") as client:
        logged_in = client.login("bob", PASSWORDS["bob"])
        assert (logged_in["account"], logged_in["username"]) == ("sandbox", "bob")
        assert whose(idp, client.token().access_token) == "bob"
        assert client.logout() == {"loggedOut": [GROUP], "sessions": [{"group": GROUP, "account": "sandbox"}], "revoked": True}
        assert client.check()["state"] == "notLoggedIn"
        assert [(s["account"], s["state"]) for s in client.status() if s["account"] != "sandbox"] == [
            ("default", "valid"), ("admin", "valid")], "the other accounts' sessions go on"
