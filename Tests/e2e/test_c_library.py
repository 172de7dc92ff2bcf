"""The C library (clients/c: libmsso.so.0, msso.h) against the real daemon, keyring and IdP: every
verb through the test driver (clients/c/tests/driver.c, one msso_client fed commands on its
standard input), each signing profile through the msso-get example against a server that checks
what it gets, events through the descriptor a caller polls, the Rust example, what a hostile
broker sends, the error table against protocol/names.json, and the installed files.

mssod knows a compiled program by its executable: the driver and the examples are registered by
path, as an app would be. Two brokers serve the module: `broker` with one group, for the verbs,
and `profiles` with one group per signing profile.
"""
import base64
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from harness import GROUP, PASSWORDS, ROOT, SECRETS, Broker, Desktop, PlantedSocket, RawClient, answers, as_uid, free_port, wait_for
import hostile_replies
from hostile_replies import HostileBrokers
from wire_names import exit_statuses
from test_browser_login import browser

DPOP, SIGNED = "com.example.dpop", "com.example.signed"
LIBRARY = ROOT / "clients" / "c"
BUILD = LIBRARY / "build"
DRIVER, GET, WATCH, RUST = BUILD / "msso-c-driver", BUILD / "msso-get", BUILD / "msso-watch", BUILD / "msso_sign"
PROGRAMS = [DRIVER, GET, WATCH, RUST]
RUSTC = shutil.which("rustc") or next((p for p in [Path.home() / ".cargo" / "bin" / "rustc"] if p.exists()), None)


def record(answer):
    """Every token in a driver's answer goes to SECRETS, for the final log check."""
    for name, value in answer.get("headers", []):
        if name in ("Authorization", "DPoP", "Signature"):
            SECRETS.add(value.split(" ", 1)[-1])
    if answer.get("accessToken"):
        SECRETS.add(answer["accessToken"])
    return answer


class Driver:
    """The test driver: one process holding one msso_client; each command one line, each answer
    one line of JSON."""

    def __init__(self, env, connect=True, path=None, prefix=()):
        self.process = subprocess.Popen([*prefix, DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.buffer = b""
        if connect:
            answer = self("connect", *([path] if path else []))
            assert answer["ok"], answer

    def send(self, *fields):
        # (surrogateescape: "\udcff" sends the byte 0xFF, which no UTF-8 string holds)
        self.process.stdin.write(("\t".join(map(str, fields)) + "\n").encode("utf-8", "surrogateescape"))
        self.process.stdin.flush()

    def line(self, timeout=30):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.process.stdout], [], [], left)[0]:
                raise TimeoutError("the driver did not answer in time")
            chunk = os.read(self.process.stdout.fileno(), 65536)
            if not chunk:
                raise EOFError(f"the driver exited ({self.process.wait()})")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return record(json.loads(line))

    def __call__(self, *fields, timeout=30):
        self.send(*fields)
        return self.line(timeout)

    def close(self):
        """Ends the driver; it must exit normally (no crash, whatever it heard)."""
        self.process.stdin.close()
        assert self.process.wait(timeout=10) == 0


def bearer(answer):
    assert answer["ok"], answer
    (header,) = answer["headers"]
    assert header[0] == "Authorization" and header[1].startswith("Bearer ")
    return header[1]


def failure(answer, name, status):
    """Checks that the answer is the error `name` with msso's exit status for it."""
    assert not answer["ok"] and answer["name"] == name and answer["exitStatus"] == status, answer
    assert answer["message"], "every error carries a sentence"
    return answer


@pytest.fixture(scope="module")
def built():
    """The library, the examples, the driver and (where rustc is) the Rust example."""
    done = subprocess.run(["make", "-s", "-C", LIBRARY, "tests"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    if RUSTC:
        done = subprocess.run(["make", "-s", "-C", LIBRARY, "rust", f"RUSTC={RUSTC}"], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr


def c_broker(desktop, idp, groups):
    """A broker whose groups the C programs are registered for, by path."""
    daemon = Broker(desktop, idp, groups=groups, start=False)
    daemon.register("c-programs", PROGRAMS, list(groups))
    daemon.start()
    return daemon


@pytest.fixture(scope="module")
def redirect(idp):
    """A loopback redirect of the module's own for browser logins (runs in parallel do not meet)."""
    uri = f"http://127.0.0.1:{free_port()}/callback"
    idp.allow_redirect(uri)
    return uri


@pytest.fixture(scope="module")
def broker(built, idp, redirect):
    desktop = Desktop()
    daemon = c_broker(desktop, idp, {GROUP: {"redirect_uri": redirect}})
    yield daemon
    daemon.stop()
    desktop.cleanup()


@pytest.fixture
def driver(broker):
    program = Driver(broker.env)
    yield program
    program.close()


@pytest.fixture(scope="module")
def profiles(built, idp, api):
    """A group per signing profile; the bearer group's tokens are for the API only."""
    desktop = Desktop()
    daemon = c_broker(desktop, idp, {GROUP: {"resources": [f"{api.url}/"]}, DPOP: {"sign": "dpop"},
                                     SIGNED: {"sign": "http-signature"}})
    key = json.loads(daemon.msso("keys", "--json", "--group", SIGNED).stdout)
    api.signature_key = (key["pem"], key["keyID"], key["kind"])
    for group, user in [(GROUP, "alice"), (DPOP, "alice"), (SIGNED, "alice")]:
        assert daemon.login(user, group=group).returncode == 0
    yield daemon
    daemon.stop()
    desktop.cleanup()


def run(program, *argv, env, timeout=30):
    return subprocess.run([program, *map(str, argv)], env=env, capture_output=True, text=True, timeout=timeout)


# -- the library itself ----------------------------------------------------------------------------

def test_the_unit_tests_pass_under_the_sanitizers(built):
    done = subprocess.run(["make", "-s", "-C", LIBRARY, "check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "all passed" in done.stdout, done.stdout + done.stderr


def test_the_library_exports_its_api_alone_versioned_and_needs_only_libc(built):
    library = BUILD / "libmsso.so.0"
    dynamic = subprocess.run(["readelf", "-d", library], check=True, capture_output=True, text=True).stdout
    assert re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", dynamic) == ["libc.so.6"]
    assert "Library soname: [libmsso.so.0]" in dynamic
    symbols = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    exported = {line.split()[-1] for line in symbols.splitlines()}
    declared = set(re.findall(r"\b(msso_\w+)\(", (LIBRARY / "msso.h").read_text()))
    # Each function in the version node msso.map gives it: MSSO_0, and those added later in nodes
    # of their own (MSSO_0.1: msso_set_account, msso_account), each symbol in one node.
    script = re.sub(r"/\*.*?\*/", "", (LIBRARY / "msso.map").read_text(), flags=re.S)
    nodes = {node: set(re.findall(r"\b(msso_\w+);", body))
             for node, body in re.findall(r"(MSSO_[\d.]+) \{\s*global:(.*?)(?:local: \*;\s*)?\}", script, re.S)}
    assert set().union(*nodes.values()) == declared and sum(map(len, nodes.values())) == len(declared), nodes
    assert {"msso_set_account", "msso_account"} == nodes["MSSO_0.1"]
    assert exported == {f"{name}@@{node}" for node, names in nodes.items() for name in names} | set(nodes)
    # The header is C99 as well as C11, and C++.
    for compiler, flags in [("cc", ["-x", "c", "-std=c99", "-pedantic-errors"]), ("g++", ["-x", "c++", "-std=c++11"])]:
        if shutil.which(compiler):
            done = subprocess.run([compiler, *flags, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", LIBRARY / "msso.h"],
                                  capture_output=True, text=True)
            assert done.returncode == 0, (compiler, done.stderr)


def test_the_error_table_is_the_definition(built):
    """msso_protocol.h's MSSO_ERRORS as compiled into the library: each code's name and exit status
    are protocol/names.json's (which the header is generated from), and none is missing."""
    program = Driver({}, connect=False)
    table = program("errors")
    program.close()
    expected = exit_statuses()
    assert len(expected) >= 21 and expected["NotLoggedIn"] == 2 and expected["Internal"] == 70
    assert {name: status for _, name, status in table["errors"]} == expected
    assert [code for code, _, _ in table["errors"]] == list(range(1, len(expected) + 1))
    assert (table["ok_name"], table["ok_status"]) == ("", 0)
    assert table["out_of_range"] == ["", 70]


def test_make_install_puts_what_a_program_builds_against(built, tmp_path):
    """`make install` (as the top-level install and the package run it), into a scratch root; a
    program built with pkg-config against it runs."""
    done = subprocess.run(["make", "-s", "-C", LIBRARY, "install", f"DESTDIR={tmp_path}", "PREFIX=/usr",
                           "LIBDIR=/usr/lib/x86_64-linux-gnu"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    libdir = tmp_path / "usr/lib/x86_64-linux-gnu"
    assert (libdir / "libmsso.so.0").is_file() and os.readlink(libdir / "libmsso.so") == "libmsso.so.0"
    assert (libdir / "libmsso.so.0").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "usr/include/msso.h").is_file() and (tmp_path / "usr/include/msso_protocol.h").is_file()
    pc = (libdir / "pkgconfig" / "msso.pc").read_text()
    version = re.match(r"msso \(([^-)]+)", (ROOT / "dist/debian/changelog").read_text()).group(1)
    assert "libdir=/usr/lib/x86_64-linux-gnu\n" in pc and "includedir=/usr/include\n" in pc and f"Version: {version}\n" in pc
    program = tmp_path / "program.c"
    program.write_text('#include <msso.h>\n#include <stdio.h>\n'
                       'int main(void) { printf("%s %d\\n", msso_error_name(MSSO_E_NOT_LOGGED_IN), MSSO_MAX_FRAME); return 0; }\n')
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"), PKG_CONFIG_SYSROOT_DIR=str(tmp_path))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "msso"], env=env, check=True, capture_output=True,
                           text=True).stdout.split()
    assert f"-I{tmp_path}/usr/include" in flags and "-lmsso" in flags
    subprocess.run(["cc", "-Wall", "-Werror", "-o", tmp_path / "program", program, *flags], check=True)
    done = subprocess.run([tmp_path / "program"], env=dict(os.environ, LD_LIBRARY_PATH=str(libdir)), capture_output=True,
                          text=True)
    assert done.stdout == "NotLoggedIn 65536\n"


# -- the verbs -------------------------------------------------------------------------------------

def test_hello_finds_the_users_broker_and_says_how_it_sees_us(broker, tmp_path):
    # No MSSO_SOCKET: $XDG_RUNTIME_DIR/msso/broker.sock, as the harness's desktop has it.
    assert "MSSO_SOCKET" not in broker.env
    program = Driver(broker.env, connect=False)
    hello = program("connect")
    assert hello["ok"] and hello["daemon"].startswith("mssod ") and hello["executable"] == str(DRIVER)
    assert program("connect", broker.socket)["ok"]
    failure(program("connect", tmp_path / "nothing.sock"), "BrokerUnreachable", 3)
    program.close()
    # $MSSO_SOCKET comes first.
    program = Driver(dict(broker.env, MSSO_SOCKET=str(tmp_path / "nothing.sock")), connect=False)
    answer = failure(program("connect"), "BrokerUnreachable", 3)
    assert "not running" in answer["message"] and str(tmp_path / "nothing.sock") in answer["message"]
    program.close()


def test_status_check_login_extend_logout(driver, broker, idp):
    assert driver("logout", "-")["ok"]
    (status,) = driver("status")["sessions"]
    assert status["group"] == GROUP and status["state"] == "notLoggedIn" and status["issuer"] == idp.issuer
    assert driver("check")["session"]["state"] == driver("check", GROUP)["session"]["state"] == "notLoggedIn"

    before = time.time()
    logged_in = driver("login-password", "-", "alice", PASSWORDS["alice"])["session"]
    assert logged_in["state"] == "valid" and logged_in["username"] == "alice" and logged_in["admin"] is True
    assert before - 1 <= logged_in["loggedInAt"] <= time.time() + 1
    assert logged_in["sessionExpiresAt"] == pytest.approx(logged_in["loggedInAt"] + 1800, abs=2)
    assert logged_in["sessionMaxAt"] == pytest.approx(logged_in["loggedInAt"] + 12 * 3600, abs=2)
    assert logged_in["accessTokenExpiresAt"] > time.time()
    assert driver("status", GROUP)["sessions"] == [driver("check")["session"]]

    extended = driver("extend")["session"]
    assert extended["sessionExpiresAt"] >= logged_in["sessionExpiresAt"]
    assert driver("logout", "-") == {"ok": True, "loggedOut": [GROUP], "revoked": 1, "notRevoked": 0}
    assert driver("logout", "all") == {"ok": True, "loggedOut": [], "revoked": -1, "notRevoked": 0}
    assert driver("check")["session"]["state"] == "notLoggedIn"
    assert broker.status_json()["state"] == "notLoggedIn", "the CLI sees the library's logout"


def test_sign_and_token_give_what_the_idp_accepts(driver, broker, idp):
    assert broker.login().returncode == 0
    authorization = bearer(driver("sign", "GET", f"{idp.issuer}/userinfo"))
    userinfo = requests.get(f"{idp.issuer}/userinfo", headers={"Authorization": authorization}, timeout=5)
    assert userinfo.status_code == 200 and userinfo.json()["sub"]
    # Headers and a body (sent as its SHA-256) are accepted; a bearer group ignores them.
    assert bearer(driver("sign", "POST", "https://api.example.com/items", "header=Content-Type: application/json",
                         'body={"a": 1}', f"group={GROUP}")) == authorization
    token = driver("token")
    assert token["ok"] and f"Bearer {token['accessToken']}" == authorization
    assert token["header"] == "Bearer" and token["expiresAt"] > time.time()
    assert driver("token", "renew")["accessToken"], "refreshed (at most once every 10 s)"


def test_errors_carry_the_name_the_sentence_and_the_clis_exit_status(driver, broker):
    assert driver("logout", "-")["ok"]
    refused = failure(driver("sign", "GET", "https://api.example.com/"), "NotLoggedIn", 2)
    assert "msso login" in refused["message"]
    assert broker.msso("sign", "--url", "https://api.example.com/").returncode == refused["exitStatus"]
    failure(driver("extend"), "NotLoggedIn", 2)
    failure(driver("check", "com.example.nope"), "UnknownGroup", 64)
    assert broker.msso("check", "--group", "com.example.nope").returncode == 64
    failure(driver("call", "frobnicate"), "UnknownMethod", 64)
    assert "method" in failure(driver("call", "sign", '{"url": "https://a.example/"}'), "BadRequest", 64)["message"]
    failure(driver("call", "sign", "[1]"), "BadRequest", 64)  # not an object: refused before it is sent
    failure(driver("call", "hello", '{"version": 1}'), "BadRequest", 64)
    wrong = failure(driver("login-password", "-", "alice", "not-the-password"), "InvalidCredentials", 6)
    assert "not-the-password" not in json.dumps(wrong)
    assert "UTF-8" in failure(driver("login-password", "-", "alice", "\udcff"), "BadRequest", 64)["message"]
    for method in ("apps", "audit", "diagnose", "keys"):  # the user's own tools only
        failure(driver("call", method), "Forbidden", 7)
    # An oversized call is refused before it leaves, and the connection is still fine.
    assert "limit" in failure(driver("call", "ping", json.dumps({"data": "x" * 70000})), "BadRequest", 64)["message"]
    assert driver("call", "ping", '{"data": "still here \\u00e9"}')["result"] == {"data": "still here é"}


# -- events ----------------------------------------------------------------------------------------

def test_events_through_the_descriptor_a_caller_polls(driver, broker):
    assert driver("logout", "-")["ok"]
    assert driver("subscribe")["ok"]
    assert driver("poll", 0)["readable"] is False and driver("next", 0)["event"] is None

    assert broker.login().returncode == 0
    assert driver("poll", 5000)["readable"] is True, "the descriptor woke for LoggedIn"
    event = driver("next", 0)["event"]
    assert (event["name"], event["signal"], event["status"]["group"]) == ("LoggedIn", 0, GROUP)
    assert event["status"]["state"] == "valid" and event["status"]["username"] == "alice"
    assert driver("poll", 0)["readable"] is False

    # A signal sent before a call's reply (the daemon sends a change's signals first) is read by
    # that call: the descriptor says it waits all the same.
    assert driver("extend")["ok"]
    assert driver("poll", 0)["readable"] is True
    assert driver("next", 0)["event"]["name"] == "Extended"
    assert broker.msso("logout").returncode == 0
    event = driver("next", 5000)["event"]
    assert (event["name"], event["status"]["state"]) == ("LoggedOut", "notLoggedIn")
    assert driver("next", 200)["event"] is None


def test_the_watch_example_prints_the_events_from_its_poll_loop(broker):
    broker.msso("logout")
    watcher = subprocess.Popen([WATCH, "--count", "3", GROUP], env=broker.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert watcher.stdout.readline() == "watching\n"
    assert broker.login().returncode == 0
    assert broker.msso("extend").returncode == 0
    assert broker.msso("logout").returncode == 0
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert out.splitlines() == [f"LoggedIn {GROUP} valid", f"Extended {GROUP} valid", f"LoggedOut {GROUP} notLoggedIn"]


def test_a_lost_connection_ends_the_subscription_and_the_next_call_reconnects(driver, broker):
    assert driver("subscribe")["ok"]
    broker.restart()
    failure(driver("next", 5000), "BrokerUnreachable", 3)
    failure(driver("next", 0), "BrokerUnreachable", 3)  # not subscribed any more
    assert driver("call", "ping", '{"data": "back"}')["result"] == {"data": "back"}, "the next call reconnected"
    assert driver("subscribe")["ok"]
    assert driver("next", 0)["event"] is None


def test_a_connection_closed_for_idleness_is_opened_again(built, desktop, idp):
    daemon = Broker(desktop, idp, args=["--idle-timeout", "1"], start=False)
    daemon.register("c-programs", PROGRAMS, [GROUP])
    daemon.start()
    try:
        program = Driver(daemon.env)
        witness = RawClient(daemon.socket)  # idle since after the driver: closed after it
        assert witness.receive()["error"] == "TimedOut"
        answer = program("call", "ping", '{"data": "again"}')
        assert answer.get("result") == {"data": "again"}, answer
        program.close()
    finally:
        daemon.stop()


def test_a_forked_child_signs_on_a_connection_of_its_own(driver, broker):
    assert broker.login().returncode == 0
    parent = driver("pid")["pid"]
    signed = driver("fork-sign", "https://api.example.com/")
    child = driver.line()["child"]
    assert driver.line() == {"ok": True, "parent": parent} and child != parent
    bearer(signed)
    assert driver("call", "ping", '{"data": "parent again"}')["ok"]

    # The daemon judged the child's sign by its own sender (the audit log is written in batches).
    def signed_by_the_child():
        rows = json.loads(broker.msso("audit", "--json", "--since", "5m").stdout)
        return any(row["pid"] == child and row["verb"] == "sign" and row["outcome"] == "ok" for row in rows)
    wait_for(signed_by_the_child, what="the child's sign in the audit log")


def test_an_answer_that_comes_too_late_is_skipped_by_its_serial(driver, broker):
    """unlock with a wrong passphrase is answered a second late: the call times out first, and the
    late answer must not be taken for the next call's."""
    passphrase = "c library passphrase"
    SECRETS.add(passphrase)
    assert driver("call", "lock", json.dumps({"passphrase": passphrase}))["result"]["locked"] is True
    try:
        # The call ends at its timeout, not at the late answer (a second away): the library waits
        # in a blocking recv whose SO_RCVTIMEO it sets short of the deadline, then polls the rest;
        # neither too early nor past it by more than a loaded machine's delay.
        assert driver("timeout", 300)["ok"]
        started = time.monotonic()
        answer = failure(driver("call", "unlock", '{"passphrase": "wrong"}'), "BrokerUnreachable", 3)
        took = time.monotonic() - started
        assert "in time" in answer["message"]
        assert 0.3 <= took < 0.8, f"a 300 ms call ended after {took:.3f} s"
        assert driver("call", "ping", '{"data": "after"}')["result"] == {"data": "after"}
        failure(driver("sign", "GET", "https://api.example.com/"), "Locked", 8)
    finally:
        assert driver("timeout", 20000)["ok"]
        wait_for(lambda: driver("call", "unlock", json.dumps({"passphrase": passphrase}))["ok"], timeout=30,
                 interval=0.2, what="unlock")


# -- logins that wait for the user ----------------------------------------------------------------

def test_device_logins_show_the_prompt_and_share_one_approval(broker, idp):
    """Two drivers at once: both are shown the one code (the second joins the first login), and
    one approval logs both in."""
    # The group's account is alice's (a login that may set it, the group's first, is never joined).
    assert broker.login().returncode == 0 and broker.msso("logout").returncode == 0
    first, second = Driver(broker.env), Driver(broker.env)
    try:
        first.send("login-device", "-")
        prompt = first.line()["prompt"]
        second.send("login-device", GROUP)
        joined = second.line()["prompt"]
        assert prompt["flow"] == "device" and prompt["url"].startswith(idp.issuer) and prompt["expiresAt"] > time.time()
        assert prompt["userCode"] == joined["userCode"] and (prompt["joined"], joined["joined"]) == (False, True)
        idp.approve_device(prompt["userCode"])
        for program in (first, second):
            answer = program.line(timeout=60)
            assert answer["ok"] and answer["session"]["state"] == "valid", answer
    finally:
        first.close()
        second.close()


def test_a_browser_login_gives_the_address_to_open(driver, broker, idp):
    broker.msso("logout")
    driver.send("login-browser", "-")
    prompt = driver.line()["prompt"]
    assert prompt["flow"] == "browser" and prompt["url"].startswith(f"{idp.issuer}/auth?") and prompt["userCode"] is None
    assert browser(idp, prompt["url"]).status_code == 200
    answer = driver.line(timeout=60)
    assert answer["ok"] and answer["session"]["state"] == "valid" and answer["session"]["username"], answer


# -- the signing profiles, through the msso-get example --------------------------------------------

def test_bearer_within_the_groups_resources(profiles, api):
    refusals = dict(api.refusals)
    done = run(GET, "--group", GROUP, f"{api.url}/items?page=2", env=profiles.env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"user": "alice", "path": "/items"}
    done = run(GET, "--group", GROUP, "http://127.0.0.1:9/elsewhere", env=profiles.env)
    assert done.returncode == 7 and api.url in done.stderr, "outside the resources: nothing signed, nothing sent"
    assert api.refusals == refusals


def test_dpop_with_the_servers_nonce(profiles, api):
    """The server asks for its nonce with a 401 (RFC 9449 §9) and renews it with every 200: each
    run pays one 401, signed again with the nonce it names."""
    before = api.refusals.get("nonce", 0)
    for n in range(2):
        done = run(GET, "--group", DPOP, f"{api.url}/dpop/items/{n}?q=1", env=profiles.env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"user": "alice", "path": f"/dpop/items/{n}"}
    assert api.refusals.get("nonce", 0) == before + 2
    # The proof carries the nonce given to `sign`.
    program = Driver(profiles.env)
    answer = program("sign", "GET", f"{api.url}/dpop/x", f"group={DPOP}", "nonce=the-servers-nonce")
    program.close()
    headers = dict(answer["headers"])
    assert headers["Authorization"].startswith("DPoP ")
    claims = json.loads(base64.urlsafe_b64decode(headers["DPoP"].split(".")[1] + "=="))
    assert claims["nonce"] == "the-servers-nonce" and claims["htm"] == "GET" and claims["htu"] == f"{api.url}/dpop/x"


def test_http_signature_covers_the_body(profiles, api):
    done = run(GET, "--group", SIGNED, "--data", '{"name": "x"}', "--header", "Content-Type: application/json",
               f"{api.url}/signed/items?x=1", env=profiles.env)
    assert done.returncode == 0, done.stderr
    assert json.loads(json.loads(done.stdout)["body"]) == {"name": "x"}
    assert run(GET, "--group", SIGNED, f"{api.url}/signed/items", env=profiles.env).returncode == 0
    # Signed for one body, sent with another: refused.
    program = Driver(profiles.env)
    answer = program("sign", "POST", f"{api.url}/signed/items", f"group={SIGNED}", "header=Content-Type: application/json",
                     'body={"a": 1}')
    program.close()
    headers = dict(answer["headers"])
    assert set(headers) >= {"Authorization", "Content-Digest", "Signature-Input", "Signature"}
    forged = requests.post(f"{api.url}/signed/items", data=b'{"a": 2}',
                           headers={"Content-Type": "application/json", **headers}, timeout=10)
    assert forged.status_code == 401 and "digest" in forged.text.lower()


def test_the_examples_exit_as_the_cli_would(profiles, api):
    profiles.msso("logout", "--group", GROUP)
    try:
        done = run(GET, "--group", GROUP, f"{api.url}/items", env=profiles.env)
        assert done.returncode == 2 and "msso login" in done.stderr, "not logged in"
    finally:
        assert profiles.login(group=GROUP).returncode == 0
    assert run(GET, "nonsense", env=profiles.env).returncode == 64


@pytest.mark.skipif(not RUSTC, reason="no rustc")
def test_the_rust_example_signs_through_libmsso(profiles, api):
    done = run(RUST, f"{api.url}/items", GROUP, env=profiles.env)
    assert done.returncode == 0, done.stderr
    headers = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    record({"headers": list(headers.items())})
    answer = requests.get(f"{api.url}/items", headers=headers, timeout=10)
    assert answer.status_code == 200 and answer.json()["user"] == "alice"
    refused = run(RUST, "http://127.0.0.1:9/", GROUP, env=profiles.env)
    assert refused.returncode == 7 and "ResourceForbidden" in refused.stderr


# -- a hostile broker --------------------------------------------------------------------------------

C_VERBS = {"status": ["status"], "check": ["check"], "sign": ["sign", "GET", "https://api.example.com/"],
           "token": ["token"], "logout": ["logout", "-"], "subscribe": ["subscribe"], "login-device": ["login-device", "-"]}


def c_case(program, path, case):
    """What libmsso makes of a case of hostile_replies.py: the same fields for every library
    (hostile_replies.check), and the driver's answer to the verb."""
    got = {"outcome": "ok", "message": "", "events": None, "ended": None, "endedMessage": ""}

    def outcome(answer):
        return "ok" if answer["ok"] else answer["name"]
    answer = program("connect", path)
    if answer["ok"]:
        assert program("timeout", int(case.timeout * 1000))["ok"]
        if case.subscribed:
            assert program("subscribe")["ok"]
        program.send(*C_VERBS[case.verb])
        answer = program.line(timeout=30)
        while "prompt" in answer:  # a login's prompt comes first, on a line of its own
            answer = program.line(timeout=30)
    got.update(outcome=outcome(answer), message=answer.get("message", ""))
    if case.events is not None:
        got["events"] = 0
        while (event := program("next", 0))["ok"] and event["event"]:
            got["events"] += 1
        got.update(ended=outcome(event), endedMessage=event.get("message", ""))
    if case.verb == "hello":  # refused at every connect
        got["after"] = outcome(program("connect", path))
    else:
        after = program("call", "ping", '{"data": "after?"}')
        got["after"] = after["result"]["data"] if after["ok"] else after["name"]
    return got, answer


def test_a_hostile_broker_gets_the_librarys_own_error_and_bounded_memory(built):
    """Every case of hostile_replies.py (the list the Python and Go libraries' tests use too; every
    scenario of fake_broker.py among them), each on a socket of its own served from this process:
    the driver answers each with the error the library makes of it and never dies, serves a ping
    after it, and its peak resident memory over each case stays within hostile_replies.MEMORY_BOUND."""
    directory = tempfile.mkdtemp(prefix="msso-hostile-")  # short: a socket's path has 107 bytes at most
    brokers = HostileBrokers(directory)
    program = Driver({}, connect=False)
    failures, statuses = [], exit_statuses()
    try:
        for name, case in hostile_replies.CASES.items():
            before = hostile_replies.rss(program.process.pid)
            hostile_replies.reset_peak_rss(program.process.pid)
            got, answer = c_case(program, brokers.path(name), case)
            got["memory"] = hostile_replies.peak_rss(program.process.pid) - before
            try:
                hostile_replies.check(name, got)
                if got["outcome"] != "ok":
                    assert answer["exitStatus"] == statuses[got["outcome"]], (name, answer)
                if name == "escapes-in-message":  # as sent: the caller makes it safe to show
                    assert answer["message"] == "\x1b[31mred\x1b[0m\nfake: line\u009b"
                if name == "error-message-too-long":
                    assert answer["message"] == "x" * 1023
                if name == "state-unknown":
                    assert answer["sessions"][0]["state"] == ""
            except AssertionError as failure:
                failures.append(str(failure))
            # And the driver lives on: a crash would end its answers (and Driver.close checks its exit).
            assert program("pid")["ok"]
    finally:
        program.close()
        brokers.close()
        shutil.rmtree(directory, ignore_errors=True)
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs another uid to listen")
def test_a_socket_served_by_another_user_is_refused(built):
    """A socket another user planted (where $MSSO_SOCKET points, say) would read the calls, a
    password login's password among them: the library checks who listens before it says hello,
    and refuses a broker of another uid (the program runs as tester, eve listens)."""
    planted = PlantedSocket()
    try:
        program = Driver({}, connect=False, prefix=as_uid(1001))
        answer = failure(program("connect", planted.path), "BrokerUnreachable", 3)
        assert "another user (uid 1002)" in answer["message"]
        program.close()
        assert planted.received() == b"", "nothing was sent"
    finally:
        planted.close()
