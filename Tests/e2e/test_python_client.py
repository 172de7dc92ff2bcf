"""examples/python/msso_client.py, written from docs/PROTOCOL.md alone, against the real daemon."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from harness import GROUP, PASSWORDS, PYTHON, ROOT, SECRETS, Broker

sys.path.insert(0, str(ROOT / "examples" / "python"))
from msso_client import MSSOClient, MSSOError  # noqa: E402

SCRIPT = ROOT / "examples" / "python" / "msso_client.py"


@pytest.fixture
def client(broker):
    with MSSOClient(broker.socket, client="test_python_client") as connection:
        yield connection


def bearer(headers):
    """The token in a sign result, recorded as a secret for the final log check."""
    assert [name for name, _ in headers] == ["Authorization"], headers
    value = headers[0][1]
    assert value.startswith("Bearer ")
    SECRETS.add(value.split(" ", 1)[1])
    return value


def test_hello_reports_the_daemon_and_how_it_sees_us(client):
    assert client.version == 1
    assert client.daemon.startswith("mssod ")
    assert client.peer["uid"] == os.getuid()
    assert client.peer["pid"] == os.getpid()
    assert client.peer["executable"] == os.readlink("/proc/self/exe")
    assert client.ping("x" * 1000) == "x" * 1000


def test_status_and_check_before_and_after_a_password_login(client, idp):
    (status,) = client.status()
    assert status["group"] == GROUP and status["state"] == "notLoggedIn"
    assert client.check()["state"] == "notLoggedIn"
    assert client.check(GROUP)["state"] == "notLoggedIn"

    before = time.time()
    logged_in = client.login_password("alice", PASSWORDS["alice"])
    assert logged_in["state"] == "valid" and logged_in["username"] == "alice"
    assert logged_in["issuer"] == idp.issuer
    assert before - 1 <= logged_in["loggedInAt"] <= time.time() + 1
    assert logged_in["sessionExpiresAt"] == pytest.approx(logged_in["loggedInAt"] + 1800, abs=2)
    assert logged_in["sessionMaxAt"] == pytest.approx(logged_in["loggedInAt"] + 12 * 3600, abs=2)
    assert client.status(GROUP) == [client.check()]
    assert client.check()["username"] == "alice"

    extended = client.extend()
    assert extended["sessionExpiresAt"] >= logged_in["sessionExpiresAt"]
    assert client.logout() == [GROUP]
    assert client.logout() == []
    assert client.check()["state"] == "notLoggedIn"


def test_sign_gives_a_token_the_idp_accepts(client, idp):
    client.login_password("alice", PASSWORDS["alice"])
    authorization = bearer(client.sign("GET", "https://api.example.com/items?x=1"))
    userinfo = subprocess.run(["curl", "-sf", "-H", f"Authorization: {authorization}", f"{idp.issuer}/userinfo"],
                              capture_output=True, text=True)
    assert userinfo.returncode == 0, userinfo.stderr
    assert json.loads(userinfo.stdout)["sub"]
    # Headers and a body (sent as bodySHA256) are accepted, as a list of pairs or as a mapping.
    bearer(client.sign("POST", "https://api.example.com/items", [("Content-Type", "application/json")],
                       body=b'{"a": 1}', group=GROUP))
    bearer(client.sign("PUT", "https://api.example.com/items/1", {"Accept": "*/*"}, body="text"))


def test_signals_arrive_when_the_cli_logs_in_and_out(broker, client):
    assert client.subscribe() == [GROUP]
    assert client.next_event(timeout=0.2) is None

    assert broker.login().returncode == 0
    returned = time.monotonic()
    event = client.next_event(timeout=1.0)
    assert event is not None, "no LoggedIn within a second of the CLI's login"
    assert time.monotonic() - returned < 1.0
    assert event.name == "LoggedIn" and event.group == GROUP
    assert event.status["state"] == "valid" and event.status["username"] == "alice"

    assert broker.msso("logout").returncode == 0
    event = client.next_event(timeout=1.0)
    assert event is not None, "no LoggedOut within a second of the CLI's logout"
    assert event.name == "LoggedOut" and event.group == GROUP
    assert event.status == {**event.status, "group": GROUP, "state": "notLoggedIn"}
    assert client.next_event(timeout=0.2) is None


def test_the_window_passing_is_an_expired_signal(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"session_timeout": "2s", "session_max": "1h"}})
    try:
        with MSSOClient(daemon.socket) as client:
            client.subscribe()
            status = client.login_password("alice", PASSWORDS["alice"])
            assert client.next_event(timeout=1).name == "LoggedIn"
            event = client.next_event(timeout=4)
            assert event is not None and event.name == "Expired" and event.status["state"] == "expired"
            assert time.time() >= status["sessionExpiresAt"] - 0.1
            assert client.check()["state"] == "expired"
            with pytest.raises(MSSOError) as error:
                client.sign("GET", "https://api.example.com/")
            assert error.value.name == "Expired"
    finally:
        daemon.stop()


def test_subscribing_to_named_groups_only(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {}, "com.example.other": {}})
    try:
        with MSSOClient(daemon.socket) as watcher, MSSOClient(daemon.socket) as actor:
            assert watcher.subscribe(["com.example.other"]) == ["com.example.other"]
            actor.login_password("alice", PASSWORDS["alice"], group=GROUP)
            actor.login_password("bob", PASSWORDS["bob"], group="com.example.other")
            event = watcher.next_event(timeout=1.0)
            assert (event.name, event.group, event.status["username"]) == ("LoggedIn", "com.example.other", "bob")
            assert watcher.next_event(timeout=0.2) is None
            assert sorted(actor.logout(all=True)) == sorted([GROUP, "com.example.other"])
            assert watcher.next_event(timeout=1.0).name == "LoggedOut"
            with pytest.raises(MSSOError) as error:
                actor.check()  # two groups: the group is required
            assert error.value.name == "BadRequest"
            with pytest.raises(MSSOError) as error:
                watcher.subscribe(["com.example.nope"])
            assert error.value.name == "UnknownGroup"
    finally:
        daemon.stop()


def test_an_app_sees_and_uses_only_its_groups(desktop, idp):
    other = "com.example.other"
    daemon = Broker(desktop, idp, groups={GROUP: {}, other: {}}, register=False, start=False)
    daemon.register("python", [PYTHON], [GROUP])
    daemon.start()
    try:
        assert daemon.login(group=GROUP).returncode == 0 and daemon.login(group=other).returncode == 0
        with MSSOClient(daemon.socket) as app:
            assert [status["group"] for status in app.status()] == [GROUP]
            assert app.check()["group"] == GROUP, "registered for one group: that one is the default"
            assert app.subscribe() == [GROUP]
            bearer(app.sign("GET", "https://api.example.com/"))
            for call in (lambda: app.sign("GET", "https://api.example.com/", group=other),
                         lambda: app.check(other), lambda: app.logout(other)):
                with pytest.raises(MSSOError) as error:
                    call()
                assert error.value.name == "NotEntitled" and other in error.value.message
            for method in ("apps", "audit"):  # the user's own tools only
                with pytest.raises(MSSOError) as error:
                    app.call(method, {})
                assert error.value.name == "Forbidden"
            assert app.logout(all=True) == [GROUP], "logout all ends the app's groups only"
        assert daemon.status_json(other)["state"] == "valid"
    finally:
        daemon.stop()


def test_errors_come_back_as_msso_errors(client):
    def error_of(call, *args, **kwargs):
        with pytest.raises(MSSOError) as raised:
            call(*args, **kwargs)
        assert raised.value.message, "every error carries a sentence for the user"
        return raised.value

    assert error_of(client.sign, "GET", "https://api.example.com/").name == "NotLoggedIn"
    assert error_of(client.extend).name == "NotLoggedIn"
    assert error_of(client.check, "com.example.nope").name == "UnknownGroup"
    assert error_of(client.sign, "GET", "https://a.example/", group="com.example.nope").name == "UnknownGroup"
    assert error_of(client.call, "frobnicate", {}).name == "UnknownMethod"
    bad = error_of(client.call, "sign", {"url": "https://a.example/"})
    assert bad.name == "BadRequest" and "method" in bad.message
    assert error_of(client.call, "hello", {"version": 1}).name == "BadRequest"
    wrong = error_of(client.login_password, "alice", "not-the-password")
    assert wrong.name == "InvalidCredentials" and "not-the-password" not in wrong.message
    # After all that the connection is still fine.
    assert client.ping("still here") == "still here"


def test_device_login_shows_the_prompt_and_waits_for_approval(client, idp):
    prompts = []

    def approve(prompt):  # called while the login call is still open
        prompts.append(prompt)
        idp.approve_device(prompt["userCode"])

    status = client.login_device(on_prompt=approve, timeout=60)
    # (`username` is whatever the IdP says: with these scopes glewlwyd gives only the opaque `sub`.)
    assert status["state"] == "valid" and status["username"]
    (prompt,) = prompts
    assert prompt["verificationURI"].startswith(idp.issuer)
    assert prompt["expiresAt"] > time.time()


def test_a_lost_connection_is_broker_unreachable(broker, client):
    client.subscribe()
    broker.stop()
    with pytest.raises(MSSOError) as error:
        client.next_event(timeout=5)
    assert error.value.name == "BrokerUnreachable"
    with pytest.raises(MSSOError) as error:
        client.status()
    assert error.value.name == "BrokerUnreachable"


def test_no_broker_is_broker_unreachable(tmp_path):
    with pytest.raises(MSSOError) as error:
        MSSOClient(tmp_path / "nothing.sock")
    assert error.value.name == "BrokerUnreachable"


def test_one_connection_shared_by_threads(client):
    """Calls from several threads on one connection are matched to their replies by serial, while
    another thread waits for signals on the same connection."""
    client.login_password("alice", PASSWORDS["alice"])
    client.subscribe()
    failures, events = [], []

    def signer(n):
        try:
            for i in range(20):
                assert client.ping(f"{n}-{i}") == f"{n}-{i}"
                bearer(client.sign("GET", f"https://api.example.com/{n}/{i}"))
        except Exception as error:  # noqa: BLE001 (reported below)
            failures.append(error)

    def watcher():
        events.append(client.next_event(timeout=10))

    watching = threading.Thread(target=watcher)
    watching.start()
    threads = [threading.Thread(target=signer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures
    client.extend()
    watching.join(timeout=5)
    assert [event.name for event in events] == ["Extended"]


def test_the_script_is_a_small_cli(broker):
    def script(*argv, input=None):
        return subprocess.run([sys.executable, SCRIPT, *argv], env=broker.env, input=input, capture_output=True,
                              text=True, timeout=30)

    assert script("check").returncode == 2
    watch = subprocess.Popen([sys.executable, SCRIPT, "watch"], env=broker.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert "Watching" in watch.stderr.readline()
        login = script("login", "alice", input=PASSWORDS["alice"] + "\n")
        assert login.returncode == 0, login.stderr
        assert f"{GROUP}: logged in as alice" in login.stdout
        assert watch.stdout.readline().startswith(f"LoggedIn: {GROUP}: logged in as alice")
    finally:
        watch.terminate()
        watch.wait(timeout=5)

    status = json.loads(script("status", "--json").stdout)
    assert status["groups"][0]["state"] == "valid"
    assert script("check").returncode == 0
    signed = script("sign", "https://api.example.com/", "--method", "POST", "--header", "Accept: */*")
    assert signed.returncode == 0, signed.stderr
    assert bearer([tuple(signed.stdout.strip().split(": ", 1))])
    assert script("logout").stdout.strip() == f"Logged out of {GROUP}."
    failed = script("sign", "https://api.example.com/")
    assert failed.returncode == 1 and "NotLoggedIn" in failed.stderr
