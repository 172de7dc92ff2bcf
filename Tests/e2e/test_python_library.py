"""The Python library (clients/python, package `msso`) against the real daemon, keyring and IdP:
every verb, both clients, each signing profile through requests and httpx against a server that
checks what it gets, and the keyring backend under a real pip.

Two brokers serve the whole module: `broker` with one group, for the verbs, and `profiles` with
one group per signing profile, for the HTTP adapters and pip.
"""
import asyncio
import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import zipfile
from pathlib import Path

import httpx
import pytest
import requests

import msso
import msso.aio
import msso.httpx
import msso.requests
from api_server import APIServer
from faults import frozen
from harness import GROUP, PASSWORDS, PYTHON, ROOT, SECRETS, Broker, Desktop, RawClient
import hostile_replies
from hostile_replies import HostileBrokers
from wire_names import exit_statuses

DPOP, SIGNED = "com.example.dpop", "com.example.signed"
LIBRARY = ROOT / "clients" / "python"


def secret(headers):
    """The token in signed headers, recorded for the final log check; returns the headers."""
    for name, value in headers:
        if name in ("Authorization", "DPoP", "Signature"):
            SECRETS.add(value.split(" ", 1)[-1])
    return headers


def bearer(headers):
    assert [name for name, _ in headers] == ["Authorization"], headers
    assert headers[0][1].startswith("Bearer ")
    return secret(headers)[0][1]


@pytest.fixture(scope="module")
def broker(idp):
    desktop = Desktop()
    daemon = Broker(desktop, idp)
    yield daemon
    daemon.stop()
    desktop.cleanup()


@pytest.fixture
def client(broker):
    with msso.Client(broker.socket, client="test_python_library") as connection:
        yield connection


@pytest.fixture(scope="module")
def api(idp, tmp_path_factory):
    server = APIServer(idp, index=package_index(tmp_path_factory.mktemp("index")))
    yield server
    SECRETS.update(server.seen)
    server.close()


@pytest.fixture(scope="module")
def profiles(idp, api):
    """A broker with a group per signing profile; the bearer group's tokens are for the API only."""
    desktop = Desktop()
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": [f"{api.url}/"]}, DPOP: {"sign": "dpop"},
                                          SIGNED: {"sign": "http-signature"}})
    key = json.loads(daemon.msso("keys", "--json", "--group", SIGNED).stdout)
    api.signature_key = (key["pem"], key["keyID"], key["kind"])
    yield daemon
    daemon.stop()
    desktop.cleanup()


def logged_in(daemon, *groups):
    """Logs alice in with the CLI (each named group, else the only one)."""
    for group in groups or [None]:
        done = daemon.login(group=group)
        assert done.returncode == 0, done.stderr


# -- the verbs ------------------------------------------------------------------------------------

def test_hello_reports_the_daemon_and_how_it_sees_us(client):
    assert client.version == 1
    assert client.daemon.startswith("mssod ")
    assert client.peer["uid"] == os.getuid() and client.peer["pid"] == os.getpid()
    assert client.peer["executable"] == os.readlink("/proc/self/exe")
    assert client.ping("x" * 1000) == "x" * 1000


def test_status_check_login_extend_logout(client, broker, idp):
    client.logout()
    (status,) = client.status()
    assert status["group"] == GROUP and status["state"] == "notLoggedIn"
    assert client.check()["state"] == client.check(GROUP)["state"] == "notLoggedIn"

    before = time.time()
    logged_in = client.login("alice", io.StringIO(PASSWORDS["alice"] + "\n"))  # as from --password-stdin
    assert logged_in["state"] == "valid" and logged_in["username"] == "alice" and logged_in["issuer"] == idp.issuer
    assert before - 1 <= logged_in["loggedInAt"] <= time.time() + 1
    assert logged_in["sessionExpiresAt"] == pytest.approx(logged_in["loggedInAt"] + 1800, abs=2)
    assert logged_in["sessionMaxAt"] == pytest.approx(logged_in["loggedInAt"] + 12 * 3600, abs=2)
    assert client.status(GROUP) == [client.check()]

    extended = client.extend()
    assert extended["sessionExpiresAt"] >= logged_in["sessionExpiresAt"]
    assert client.logout() == {"loggedOut": [GROUP], "revoked": True, "sessions": [{"group": GROUP, "account": "default"}]}
    assert client.logout() == {"loggedOut": []}
    assert client.check()["state"] == "notLoggedIn"
    assert broker.status_json()["state"] == "notLoggedIn", "the CLI sees the library's logout"


def test_the_account_option_and_the_fields_that_name_accounts(monkeypatch):
    """Which account a client acts as (test_accounts_clients.py shows it against the daemon), and the
    SessionStatus and logout fields that name accounts, held to their types like the rest."""
    from msso import _wire
    monkeypatch.setenv("MSSO_ACCOUNT", "from-env")
    assert msso.Client("/nonexistent", connect=False).account == "from-env"
    assert msso.aio.Client("/nonexistent").account == "from-env"
    assert msso.Client("/nonexistent", connect=False, account="admin").account == "admin"
    monkeypatch.setenv("MSSO_ACCOUNT", "")
    client = msso.Client("/nonexistent", connect=False)
    assert client.account is None
    with pytest.raises(ValueError):
        client.logout(account="admin", all=True)
    assert _wire.logout_args(None, True, "admin") == {"all": True}
    assert _wire.token_args(GROUP, False, None, "admin") == {"group": GROUP, "account": "admin"}

    session = {"group": GROUP, "account": "admin", "isDefault": True, "state": "valid"}
    assert _wire.session_of(dict(session)) == session
    for wrong in ({"account": 1}, {"isDefault": "yes"}):
        with pytest.raises(_wire.Broken):
            _wire.session_of({**session, **wrong})
    ended = {"loggedOut": [GROUP], "sessions": [{"group": GROUP, "account": "default"}, {"group": GROUP, "account": "admin"}],
             "revoked": False, "notRevoked": [{"group": GROUP, "account": "admin", "reason": "r", "refreshToken": True}]}
    assert _wire.logout_of(json.loads(json.dumps(ended))) == ended
    for wrong in ({"sessions": [{"group": GROUP}]}, {"sessions": [{"group": GROUP, "account": 1}]},
                  {"notRevoked": [{"group": GROUP, "account": 1, "reason": "r", "refreshToken": True}]}):
        with pytest.raises(_wire.Broken):
            _wire.logout_of({**ended, **wrong})


def test_sign_and_token_give_what_the_idp_accepts_and_never_show_it(client, broker, idp):
    logged_in(broker)
    headers = client.sign("GET", "https://api.example.com/items?x=1")
    authorization = bearer(headers)
    assert repr(headers) == "Headers(['Authorization'])" and authorization not in f"{headers!r} {headers}"
    userinfo = requests.get(f"{idp.issuer}/userinfo", headers=dict(headers), timeout=5)
    assert userinfo.status_code == 200 and userinfo.json()["sub"]
    # Headers and a body (sent as bodySHA256) are accepted, as pairs or as a mapping.
    bearer(client.sign("POST", "https://api.example.com/items", [("Content-Type", "application/json")], b'{"a": 1}',
                       group=GROUP))
    bearer(client.sign("PUT", "https://api.example.com/items/1", {"Accept": "*/*"}, body="text"))

    token = client.token()
    SECRETS.add(token.access_token)
    assert token.as_header() == ("Authorization", authorization)
    assert token.header == "Bearer" and token.expires_at > time.time()
    assert token.access_token not in repr(token) and token.access_token not in str(token)
    assert client.token(renew=True).access_token  # refreshed (at most once every 10 s)


def test_errors_are_named_exceptions_with_the_clis_exit_statuses(client, broker):
    client.logout()

    def error_of(call, *args, **kwargs):
        with pytest.raises(msso.MSSOError) as raised:
            call(*args, **kwargs)
        assert raised.value.message, "every error carries the daemon's sentence"
        return raised.value

    refused = error_of(client.sign, "GET", "https://api.example.com/")
    assert type(refused) is msso.NotLoggedIn and refused.name == "NotLoggedIn" and refused.exit_status == 2
    assert broker.msso("sign", "--url", "https://api.example.com/").returncode == refused.exit_status
    assert str(refused) == f"NotLoggedIn: {refused.message}" and "msso login" in refused.message
    assert type(error_of(client.extend)) is msso.NotLoggedIn
    unknown = error_of(client.check, "com.example.nope")
    assert type(unknown) is msso.UnknownGroup and unknown.exit_status == 64
    assert broker.msso("check", "--group", "com.example.nope").returncode == 64
    assert type(error_of(client.call, "frobnicate", {})) is msso.UnknownMethod
    bad = error_of(client.call, "sign", {"url": "https://a.example/"})
    assert type(bad) is msso.BadRequest and "method" in bad.message
    assert type(error_of(client.call, "hello", {"version": 1})) is msso.BadRequest
    wrong = error_of(client.login, "alice", "not-the-password")
    assert type(wrong) is msso.InvalidCredentials and wrong.exit_status == 6
    assert "not-the-password" not in f"{wrong} {wrong!r} {wrong.message}"
    # The user's own tools only: an app (this interpreter) is refused.
    for verb in (client.apps, client.audit, client.diagnose, client.keys):
        forbidden = error_of(verb)
        assert type(forbidden) is msso.Forbidden and forbidden.exit_status == 7
    # After all that the connection is still fine.
    assert client.ping("still here") == "still here"


def test_error_names_and_exit_statuses_are_the_definition(client):
    expected = exit_statuses()
    assert len(expected) >= 21 and expected["NotLoggedIn"] == 2 and expected["Internal"] == 70
    assert {name: cls.exit_status for name, cls in msso.ERRORS.items()} == expected
    for name, cls in msso.ERRORS.items():
        assert cls.__name__ == name and getattr(msso, name) is cls and issubclass(cls, msso.MSSOError)
    newer = msso.errors.error_for("SomethingNew", "a newer daemon's error")
    assert type(newer) is msso.Internal and newer.name == "SomethingNew" and newer.exit_status == 70


def test_signals_arrive_when_the_cli_logs_in_and_out(broker, client):
    client.logout()
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
    assert (event.name, event.group, event.status["state"]) == ("LoggedOut", GROUP, "notLoggedIn")
    assert client.next_event(timeout=0.2) is None


def test_events_iterates_until_the_client_is_closed(broker):
    logged_in(broker)
    watcher = msso.Client(broker.socket)
    seen = []
    events = watcher.events()  # subscribed once it returns

    def watch():
        for event in events:
            seen.append(event.name)
            if len(seen) == 2:
                watcher.close()  # ends the iteration, from inside it
    thread = threading.Thread(target=watch)
    thread.start()
    assert broker.msso("extend").returncode == 0 and broker.msso("logout").returncode == 0
    thread.join(timeout=10)
    assert not thread.is_alive() and seen == ["Extended", "LoggedOut"]
    with pytest.raises(msso.BrokerUnreachable):
        watcher.ping()


def test_the_window_passing_is_an_expired_signal(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"session_timeout": "2s", "session_max": "1h"}})
    try:
        with msso.Client(daemon.socket) as client:
            client.subscribe()
            status = client.login("alice", PASSWORDS["alice"])
            assert client.next_event(timeout=1).name == "LoggedIn"
            event = client.next_event(timeout=4)
            assert event is not None and event.name == "Expired" and event.status["state"] == "expired"
            assert time.time() >= status["sessionExpiresAt"] - 0.1
            assert client.check()["state"] == "expired"
            with pytest.raises(msso.Expired) as error:
                client.sign("GET", "https://api.example.com/")
            assert error.value.exit_status == 1
    finally:
        daemon.stop()


def test_subscribing_to_named_groups_only(profiles):
    with msso.Client(profiles.socket) as watcher, msso.Client(profiles.socket) as actor:
        assert watcher.subscribe([DPOP]) == [DPOP]
        actor.login("alice", PASSWORDS["alice"], group=GROUP)
        actor.login("alice", PASSWORDS["alice"], group=DPOP)  # (the group's account: another would be refused)
        event = watcher.next_event(timeout=1.0)
        assert (event.name, event.group, event.status["username"]) == ("LoggedIn", DPOP, "alice")
        assert watcher.next_event(timeout=0.2) is None
        assert sorted(actor.logout(all=True)["loggedOut"]) == sorted([GROUP, DPOP])
        assert watcher.next_event(timeout=1.0).name == "LoggedOut"
        with pytest.raises(msso.BadRequest):
            actor.check()  # three groups: the group is required
        with pytest.raises(msso.UnknownGroup):
            watcher.subscribe(["com.example.nope"])


def test_an_app_sees_and_uses_only_its_groups(desktop, idp):
    other = "com.example.other"
    daemon = Broker(desktop, idp, groups={GROUP: {}, other: {}}, register=False, start=False)
    daemon.register("python", [PYTHON], [GROUP])
    daemon.start()
    try:
        logged_in(daemon, GROUP, other)
        with msso.Client(daemon.socket) as app:
            assert [status["group"] for status in app.status()] == [GROUP]
            assert app.check()["group"] == GROUP, "registered for one group: that one is the default"
            assert app.subscribe() == [GROUP]
            bearer(app.sign("GET", "https://api.example.com/"))
            for call in (lambda: app.sign("GET", "https://api.example.com/", group=other),
                         lambda: app.check(other), lambda: app.logout(other)):
                with pytest.raises(msso.NotEntitled) as error:
                    call()
                assert other in error.value.message and error.value.exit_status == 7
            assert app.logout(all=True)["loggedOut"] == [GROUP], "logout all ends the app's groups only"
        assert daemon.status_json(other)["state"] == "valid"
    finally:
        daemon.stop()


def test_device_login_shows_the_prompt_and_waits_for_approval(client, broker, idp):
    """Both clients at once: the blocking one calls its prompt callback in the calling thread, the
    asyncio one awaits a coroutine's. The second login joins the first (one login per group waits
    for the user at a time): both are shown the one code, approved once."""
    # The group's account is alice's (a login that may set it, the group's first, is never joined).
    assert broker.login().returncode == 0
    prompts = []
    approved = set()
    lock = threading.Lock()

    def approve(prompt):  # called while the login call is still open
        with lock:
            prompts.append(prompt)
            if prompt["userCode"] in approved:
                return
            approved.add(prompt["userCode"])
        idp.approve_device(prompt["userCode"])

    async def approve_later(prompt):
        await asyncio.to_thread(approve, prompt)

    async def asynchronous():
        async with msso.aio.Client(broker.socket) as aio:
            return await aio.login_device(approve_later)
    statuses = []
    thread = threading.Thread(target=lambda: statuses.append(asyncio.run(asynchronous())))
    thread.start()
    statuses.append(client.login_device(approve, timeout=60))
    thread.join(timeout=60)
    # (`username` is whatever the IdP says: with these scopes glewlwyd gives only the opaque `sub`.)
    assert [status["state"] for status in statuses] == ["valid", "valid"] and all(s["username"] for s in statuses)
    assert len(prompts) == 2 and prompts[0]["userCode"] == prompts[1]["userCode"] and len(approved) == 1
    for prompt in prompts:
        assert prompt["verificationURI"].startswith(idp.issuer) and prompt["expiresAt"] > time.time()


def test_lock_refuses_every_sign_until_unlock(client, broker):
    passphrase = "python library passphrase"
    SECRETS.add(passphrase)
    logged_in(broker)
    assert client.lock(passphrase)["locked"] is True
    try:
        with pytest.raises(msso.Locked) as refused:
            client.sign("GET", "https://api.example.com/")
        assert refused.value.exit_status == 8 and passphrase not in f"{refused.value!r} {refused.value}"
        assert client.status()[0]["locked"] is True
        with pytest.raises(msso.Locked):
            client.lock("another")
    finally:
        assert client.unlock(passphrase) == {"locked": False}
    bearer(client.sign("GET", "https://api.example.com/"))


def test_one_connection_shared_by_threads(client, broker):
    """Calls from several threads on one connection are matched to their replies by serial, while
    another thread waits for signals on the same connection."""
    logged_in(broker)
    client.subscribe()
    failures, events = [], []

    def signer(n):
        try:
            for i in range(20):
                assert client.ping(f"{n}-{i}") == f"{n}-{i}"
                bearer(client.sign("GET", f"https://api.example.com/{n}/{i}"))
        except Exception as error:  # noqa: BLE001 (reported below)
            failures.append(error)

    watching = threading.Thread(target=lambda: events.append(client.next_event(timeout=10)))
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


def test_a_forked_child_opens_a_connection_of_its_own(client, broker):
    logged_in(broker)
    assert client.ping("parent") == "parent"
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: the parent's client, on a connection of its own
        try:
            os.close(read)
            answer = {"ping": client.ping("child"), "pid": client.peer["pid"], "own": os.getpid(),
                      "signed": client.sign("GET", "https://api.example.com/")}
            os.write(write, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = json.loads(pipe.read() or "{}")
    os.waitpid(child, 0)
    bearer(answer.pop("signed"))  # (recorded here: the child's SECRETS die with it)
    assert answer == {"ping": "child", "pid": answer["own"], "own": answer["own"]} and answer["own"] != os.getpid()
    assert client.ping("parent again") == "parent again" and client.peer["pid"] == os.getpid()


def test_a_lost_connection_fails_its_subscription_and_the_next_call_reconnects(broker, client):
    client.subscribe()
    broker.stop()
    with pytest.raises(msso.BrokerUnreachable):
        client.next_event(timeout=5)
    with pytest.raises(msso.BrokerUnreachable) as error:
        client.status()
    assert "not running" in error.value.message and error.value.exit_status == 3
    broker.start()
    assert client.ping("back") == "back", "the next call opened a new connection"
    with pytest.raises(msso.BrokerUnreachable):
        client.next_event(timeout=0)  # the subscription died with its connection...
    client.subscribe()
    assert client.next_event(timeout=0) is None  # ...until subscribed again


def test_a_connection_closed_for_idleness_is_opened_again(desktop, idp):
    daemon = Broker(desktop, idp, args=["--idle-timeout", "1"])
    try:
        client = msso.Client(daemon.socket)
        witness = RawClient(daemon.socket)  # idle since after the client: closed after it
        assert witness.receive()["error"] == "TimedOut"
        assert client.ping("again") == "again"
        client.close()
    finally:
        daemon.stop()


@pytest.mark.parametrize("timeout", [0.3, 1.5])
def test_a_call_mssod_does_not_answer_fails_at_its_timeout_and_the_client_goes_on(broker, timeout):
    """The library waits for an answer in a blocking recv bounded by SO_RCVTIMEO, and polls the
    last of the wait: a call to a stopped mssod gives up at its timeout, never before it, naming the
    cause; once mssod runs again the same client is served (the late answer dropped)."""
    client = msso.Client(broker.socket, timeout=timeout)
    assert client.ping("before") == "before"
    with frozen(broker.process.pid):
        started = time.monotonic()
        with pytest.raises(msso.BrokerUnreachable, match="did not answer ping in time") as error:
            client.ping("unanswered")
        taken = time.monotonic() - started
    assert error.value.exit_status == 3
    assert timeout <= taken < timeout + 1.0, taken
    assert client.ping("after") == "after"
    client.close()


def test_no_broker_is_broker_unreachable(tmp_path):
    with pytest.raises(msso.BrokerUnreachable) as error:
        msso.Client(tmp_path / "nothing.sock")
    assert error.value.exit_status == 3
    lazy = msso.Client(tmp_path / "nothing.sock", connect=False)
    with pytest.raises(msso.BrokerUnreachable):
        lazy.ping()


# -- asyncio --------------------------------------------------------------------------------------

def test_the_asyncio_client_has_the_same_verbs(broker):
    async def scenario():
        async with msso.aio.Client(broker.socket) as client:
            assert client.peer["pid"] == os.getpid() and client.daemon.startswith("mssod ")
            await client.logout()
            events = await client.events()
            assert (await client.check())["state"] == "notLoggedIn"
            with pytest.raises(msso.NotLoggedIn):
                await client.sign("GET", "https://api.example.com/")
            status = await client.login("alice", PASSWORDS["alice"])
            assert status["state"] == "valid"
            assert (await events.__anext__()).name == "LoggedIn"
            # Calls in flight together, matched by serial.
            signed = await asyncio.gather(*(client.sign("GET", f"https://api.example.com/{n}") for n in range(20)))
            for headers in signed:
                bearer(headers)
            pings = await asyncio.gather(*(client.ping(str(n)) for n in range(20)))
            assert pings == [str(n) for n in range(20)]
            token = await client.token()
            SECRETS.add(token.access_token)
            assert (await client.extend())["state"] == "valid"
            assert (await events.__anext__()).name == "Extended"
            assert [s["group"] for s in await client.status()] == [GROUP]

            with pytest.raises(msso.Forbidden):
                await client.apps()
            assert (await client.logout())["loggedOut"] == [GROUP]
            assert (await client.next_event(timeout=2)).name == "LoggedOut"
            assert await client.next_event(timeout=0.1) is None
        with pytest.raises(msso.BrokerUnreachable):
            await client.ping()
        with pytest.raises(msso.BrokerUnreachable):
            await msso.aio.connect(Path(broker.socket).with_name("nothing.sock"))
    asyncio.run(scenario())


def test_the_asyncio_client_reconnects_after_a_lost_connection(broker):
    async def scenario():
        client = await msso.aio.connect(broker.socket)
        await client.subscribe()
        broker.restart()
        with pytest.raises(msso.BrokerUnreachable):
            await client.next_event(timeout=5)
        assert await client.ping("back") == "back"
        await client.close()
    asyncio.run(scenario())


# -- a hostile broker -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile():
    """Every case of hostile_replies.py on a socket of its own (a short directory: a socket's path
    has 107 bytes at most)."""
    directory = tempfile.mkdtemp(prefix="msso-hostile-")
    brokers = HostileBrokers(directory)
    yield brokers
    brokers.close()
    shutil.rmtree(directory, ignore_errors=True)


BLOCKING_VERBS = {
    "status": lambda client, case: client.status(),
    "check": lambda client, case: client.check(),
    "sign": lambda client, case: client.sign("GET", "https://api.example.com/"),
    "token": lambda client, case: client.token(),
    "logout": lambda client, case: client.logout(),
    "subscribe": lambda client, case: client.subscribe(),
    "hello": lambda client, case: client.ping("hello first"),
    "login-device": lambda client, case: client.login_device(lambda prompt: None, timeout=case.timeout),
}


def blocking_case(path, case):
    """What msso.Client makes of a case: the same fields for every library (hostile_replies.check)."""
    got = {"outcome": hostile_replies.OK, "message": "", "events": None, "ended": None, "endedMessage": ""}
    client = msso.Client(path, timeout=case.timeout, connect=False)
    try:
        if case.subscribed:
            client.subscribe()
        try:
            BLOCKING_VERBS[case.verb](client, case)
        except msso.MSSOError as error:
            got.update(outcome=error.name, message=error.message)
        if case.events is not None:
            got["events"] = 0
            try:
                while client.next_event(timeout=2) is not None:
                    got["events"] += 1
            except msso.MSSOError as ended:
                got.update(ended=ended.name, endedMessage=ended.message)
        try:
            got["after"] = client.ping("after?")
        except msso.MSSOError as error:
            got["after"] = error.name
    finally:
        client.close()
    return got


async def asyncio_case(path, case):
    """What msso.aio.Client makes of a case."""
    verbs = {
        "status": lambda client: client.status(),
        "check": lambda client: client.check(),
        "sign": lambda client: client.sign("GET", "https://api.example.com/"),
        "token": lambda client: client.token(),
        "logout": lambda client: client.logout(),
        "subscribe": lambda client: client.subscribe(),
        "hello": lambda client: client.connect(),
        "login-device": lambda client: client.login_device(lambda prompt: None, timeout=case.timeout),
    }
    got = {"outcome": hostile_replies.OK, "message": "", "events": None, "ended": None, "endedMessage": ""}
    client = msso.aio.Client(path, timeout=case.timeout)
    try:
        if case.subscribed:
            await client.subscribe()
        try:
            await verbs[case.verb](client)
        except msso.MSSOError as error:
            got.update(outcome=error.name, message=error.message)
        if case.events is not None:
            got["events"] = 0
            try:
                while await client.next_event(timeout=2) is not None:
                    got["events"] += 1
            except msso.MSSOError as ended:
                got.update(ended=ended.name, endedMessage=ended.message)
        try:
            got["after"] = await client.ping("after?")
        except msso.MSSOError as error:
            got["after"] = error.name
    finally:
        await client.close()
    return got


@pytest.mark.parametrize("flavour", ["blocking", "asyncio"])
@pytest.mark.parametrize("name", list(hostile_replies.CASES))
def test_a_hostile_broker_gets_the_librarys_own_error_and_bounded_memory(hostile, name, flavour):
    """Every case of hostile_replies.py (the list the Go and C libraries' tests use too): the
    outcome is `ok` or the library's own error (an MSSOError naming the cause, never another
    exception); the client serves a ping after it; the signals nobody subscribed to are dropped and
    a subscriber's queue stops at its bound; tracemalloc's peak over the case stays within
    hostile_replies.MEMORY_BOUND."""
    case = hostile_replies.CASES[name]
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        if flavour == "blocking":
            got = blocking_case(hostile.path(name), case)
        else:
            got = asyncio.run(asyncio_case(hostile.path(name), case))
        got["memory"] = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    hostile_replies.check(name, got)


# -- the signing profiles, through requests and httpx ----------------------------------------------

def test_bearer_through_requests_and_httpx_within_the_groups_resources(profiles, api):
    logged_in(profiles, GROUP)
    refusals = dict(api.refusals)
    auth = msso.requests.Auth(group=GROUP, socket_path=profiles.socket)
    answer = requests.get(f"{api.url}/items?page=2", auth=auth, timeout=10)
    assert answer.status_code == 200 and answer.json() == {"user": "alice", "path": "/items"}
    with httpx.Client(auth=msso.httpx.Auth(group=GROUP, socket_path=profiles.socket)) as http:
        assert http.post(f"{api.url}/items", json={"a": 1}).json()["user"] == "alice"

    async def asynchronous():
        async with httpx.AsyncClient(auth=msso.httpx.Auth(group=GROUP, socket_path=profiles.socket)) as http:
            return (await http.get(f"{api.url}/items")).json()
    assert asyncio.run(asynchronous())["user"] == "alice"
    # Outside the group's resources nothing is signed, and the request is not sent.
    with pytest.raises(msso.ResourceForbidden) as refused:
        requests.get("http://127.0.0.1:9/elsewhere", auth=auth, timeout=5)
    assert api.url in refused.value.message and refused.value.exit_status == 7
    assert api.refusals == refusals, "no request was refused"


def test_dpop_with_the_servers_nonce_through_requests_and_httpx(profiles, api):
    """The server asks for its nonce with a 401 (RFC 9449 §9) and sends a new one with every 200:
    each library pays one 401 for its first request, then keeps up with the new nonces."""
    logged_in(profiles, DPOP)
    before = api.refusals.get("nonce", 0)
    session = requests.Session()
    session.auth = msso.requests.Auth(group=DPOP, socket_path=profiles.socket)
    for n in range(3):
        answer = session.get(f"{api.url}/dpop/items/{n}?q=1", timeout=10)
        assert answer.status_code == 200, answer.text
        assert [old.status_code for old in answer.history] == ([401] if n == 0 else [])
    assert session.post(f"{api.url}/dpop/items", json={"n": 1}, timeout=10).status_code == 200
    assert api.refusals.get("nonce", 0) == before + 1

    with httpx.Client(auth=msso.httpx.Auth(group=DPOP, socket_path=profiles.socket)) as http:
        for n in range(3):
            assert http.get(f"{api.url}/dpop/sync/{n}").json()["user"] == "alice"

    async def asynchronous():
        async with httpx.AsyncClient(auth=msso.httpx.Auth(group=DPOP, socket_path=profiles.socket)) as http:
            return [(await http.put(f"{api.url}/dpop/async/{n}", content=b"x")).status_code for n in range(3)]
    assert asyncio.run(asynchronous()) == [200, 200, 200]
    # One 401 for the first request of each Auth (the broker had the nonce before last: the last
    # came with an answer to another Auth), none for the 9 others.
    assert api.refusals.get("nonce", 0) - before == 3
    assert set(api.refusals) <= {"nonce", "no token"}, api.refusals


def test_http_signature_covers_the_body(profiles, api):
    logged_in(profiles, SIGNED)
    auth = msso.requests.Auth(group=SIGNED, socket_path=profiles.socket)
    answer = requests.post(f"{api.url}/signed/items?x=1", json={"name": "x"}, auth=auth, timeout=10)
    assert answer.status_code == 200, answer.text
    assert json.loads(answer.json()["body"]) == {"name": "x"}
    with httpx.Client(auth=msso.httpx.Auth(group=SIGNED, socket_path=profiles.socket)) as http:
        assert http.put(f"{api.url}/signed/items/1", content=b"plain", headers={"Content-Type": "text/plain"}).status_code == 200
        assert http.get(f"{api.url}/signed/items").status_code == 200
    # Signed for one body, sent with another: refused.
    with msso.Client(profiles.socket) as client:
        headers = secret(client.sign("POST", f"{api.url}/signed/items", {"Content-Type": "application/json"}, b'{"a": 1}',
                                     group=SIGNED))
    forged = requests.post(f"{api.url}/signed/items", data=b'{"a": 2}',
                           headers={"Content-Type": "application/json", **dict(headers)}, timeout=10)
    assert forged.status_code == 401 and "digest" in forged.text.lower()


def test_the_examples_run(profiles, api):
    logged_in(profiles, GROUP)
    env = dict(profiles.env, PYTHONPATH=str(LIBRARY / "src"))
    done = subprocess.run([sys.executable, LIBRARY / "examples" / "sign_requests.py", f"{api.url}/items", "--group", GROUP],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"user": "alice", "path": "/items"}
    done = subprocess.run([sys.executable, LIBRARY / "examples" / "httpx_async.py", f"{api.url}/items", "--group", GROUP],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "alice" in done.stdout
    profiles.msso("logout", "--group", GROUP)
    done = subprocess.run([sys.executable, LIBRARY / "examples" / "sign_requests.py", f"{api.url}/items", "--group", GROUP],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "msso login" in done.stderr, "exits as the CLI would: not logged in"


# -- pip, through the keyring backend ----------------------------------------------------------------

def package_index(directory: Path) -> Path:
    """A PEP 503 index with one small wheel, msso-probe 1.0."""
    dist = "msso_probe-1.0.dist-info"
    files = {"msso_probe/__init__.py": b"WHERE = 'the private index'\n",
             f"{dist}/METADATA": b"Metadata-Version: 2.1\nName: msso-probe\nVersion: 1.0\n",
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: msso-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
                     for path, data in files.items()) + f"{dist}/RECORD,,\n"
    wheel = directory / "files" / "msso_probe-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{dist}/RECORD", record)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    page = directory / "simple" / "msso-probe" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<html><body><a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a></body></html>\n')
    return directory


@pytest.fixture(scope="module")
def scratch_venv(tmp_path_factory):
    """A virtual environment with this library installed by pip (from a copy, so that the build
    leaves nothing in the sources), as a user would; pip, keyring and setuptools come from the
    tests' environment through a .pth file (no network here). A `keyring` command that sees this
    library lies in a directory of its own (pip's subprocess provider skips one in its own
    environment's bin), as `pipx inject keyring msso` would make it."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "tests-venv.pth").write_text(next(p for p in sys.path if p.endswith("site-packages")) + "\n")
    source = tmp_path_factory.mktemp("source") / "python"
    shutil.copytree(LIBRARY, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    done = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "-q", source], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (venv / "tools").mkdir()
    (venv / "tools" / "keyring").write_text(f"#!{venv}/bin/python\nimport sys\nfrom keyring.cli import main\nsys.exit(main())\n")
    (venv / "tools" / "keyring").chmod(0o755)
    return venv


def pip_install(venv, profiles, *runs):
    """Runs `pip install msso-probe` for each (index URL, keyring provider), at once; returns each
    one's (completed process, whether the package was installed)."""
    env = dict(profiles.env, KEYRING_PROPERTY_GROUP=GROUP, PATH=f"{venv}/tools:{os.environ['PATH']}")
    started = []
    for index_url, provider in runs:
        target = Path(tempfile.mkdtemp(prefix="msso-pip-"))
        argv = [venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--no-input",
                "--disable-pip-version-check", "--keyring-provider", provider, "--index-url", index_url,
                "--target", target, "msso-probe"]
        started.append((argv, target, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                       text=True)))
    results = []
    for argv, target, process in started:
        stdout, stderr = process.communicate(timeout=120)
        results.append((subprocess.CompletedProcess(argv, process.returncode, stdout, stderr),
                        (target / "msso_probe" / "__init__.py").exists()))
        shutil.rmtree(target, ignore_errors=True)
    return results


def test_pip_installs_from_a_private_index_while_logged_in_and_not_after_logout(scratch_venv, profiles, api):
    site = next(scratch_venv.glob("lib/python3*/site-packages"))
    (dist,) = site.glob("msso-*.dist-info")
    assert "msso = msso.keyring" in (dist / "entry_points.txt").read_text()
    assert re.search(r"Requires-Dist: requests.*extra == .requests.", (dist / "METADATA").read_text())
    logged_in(profiles, GROUP)
    seen = len(api.seen)

    # The subprocess provider needs the username in the URL (pip asks it only with one).
    runs = [(f"{api.url}/simple/", "import"), (f"http://__token__@127.0.0.1:{api.port}/simple/", "subprocess")]
    for done, installed in pip_install(scratch_venv, profiles, *runs):
        assert done.returncode == 0 and installed, done.stdout + done.stderr
    tokens = set(api.seen[seen:])
    assert tokens, "pip sent the broker's token"
    SECRETS.update(tokens)

    # A URL outside the group's resources gets nothing.
    env = dict(profiles.env, KEYRING_PROPERTY_GROUP=GROUP)
    elsewhere = subprocess.run([scratch_venv / "tools" / "keyring", "get", "http://127.0.0.1:9/simple/", "__token__"],
                               env=env, capture_output=True, text=True, timeout=30)
    assert elsewhere.returncode == 1 and elsewhere.stdout == "" and api.url in elsewhere.stderr

    assert profiles.msso("logout", "--group", GROUP).returncode == 0
    refused = api.refusals.get("no token", 0)
    for done, installed in pip_install(scratch_venv, profiles, *runs):
        assert done.returncode != 0 and not installed, done.stdout + done.stderr
        assert "not logged in" in done.stderr and "msso login" in done.stderr, "the daemon's sentence says what to do"
    assert api.refusals.get("no token", 0) >= refused + 2, "the index refused both"
    # And a token pip was given before the logout is refused by the index now (revoked at the IdP).
    for token in tokens:
        auth = base64.b64encode(f"__token__:{token}".encode()).decode()
        answer = requests.get(f"{api.url}/simple/msso-probe/", headers={"Authorization": f"Basic {auth}"}, timeout=10)
        assert answer.status_code == 401
