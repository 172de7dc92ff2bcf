"""pam_msso, loaded by libpam (pam_start_confdir in pam/tests/pam_driver), against a real mssod,
keyring and IdP. nss_wrapper gives the PAM user `alice` the uid the test's broker runs as."""
import functools
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import fake_broker
from faults import copy_secret
from harness import BIN, GROUP, PASSWORDS, PYTHON, ROOT, SECRETS, Broker, Desktop, answers, as_uid, free_port, wait_for

DRIVER = ROOT / "pam" / "tests" / "pam_driver"
MODULE = ROOT / "pam" / "pam_msso.so"
MATRIX = "/usr/lib/x86_64-linux-gnu/pam_wrapper/pam_matrix.so"
SET_ITEMS = "/usr/lib/x86_64-linux-gnu/pam_wrapper/pam_set_items.so"  # sets PAM items from the environment
USER = 1000  # a desktop of a real (non-root) user, where the module plays root against the user's broker


def root_only(path: Path) -> bool:
    """Whether only root can change `path` and every directory above it (sticky ones may be
    world-writable), as pam_msso requires of the mssod it gives the password to."""
    for each in [path, *path.parents]:
        info = os.lstat(each)
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        sticky_directory = each != path and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if info.st_uid != 0 or (writable and not sticky_directory):
            return False
    return True


@functools.cache
def installed_mssod() -> Path:
    """The built mssod, at a canonical path only root can change, as `make install` would put it:
    the build's own if its directories allow, else a copy in a root-owned 0755 directory in /tmp."""
    built = (BIN / "mssod").resolve()
    if root_only(built):
        return built
    directory = Path(tempfile.mkdtemp(prefix="msso-bin-")).resolve()
    directory.chmod(0o755)
    for name in ("mssod", "mssod-idp"):  # the helper that makes its IdP requests sits beside it
        shutil.copy2(built.parent / name, directory / name)
        (directory / name).chmod(0o755)
    assert root_only(directory / "mssod")
    return directory / "mssod"


class Stack:
    """A PAM config directory with one service, and the driver to run it as `alice`. Without a
    broker (a fake one listens at `socket_path`), the driver runs with a plain environment."""

    def __init__(self, directory, broker, socket_path=None, uid=os.getuid(), mssod=None):
        # A broker running as root like the driver has the driver as an app, registered by
        # pam_broker; the root role against another user's broker is covered by the USER tests.
        broker_env = broker.env if broker else {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        socket_path = socket_path or broker.socket
        self.dir = directory / "pam.d"
        self.dir.mkdir(exist_ok=True)
        self.socket = socket_path
        self.mssod = mssod or installed_mssod()
        (directory / "passwd").write_text(f"alice:x:{uid}:{uid}:Alice:/home/alice:/bin/sh\n")
        (directory / "group").write_text(f"alice:x:{uid}:\n")
        self.env = dict(broker_env, LD_PRELOAD="libnss_wrapper.so", NSS_WRAPPER_PASSWD=str(directory / "passwd"),
                        NSS_WRAPPER_GROUP=str(directory / "group"))
        self.passdb = directory / "passdb"

    def service(self, lines, local_password="alice-pass"):
        self.passdb.write_text(f"alice:{local_password}:msso-test\n")
        module = f"{MODULE} socket={self.socket} mssod={self.mssod}"
        text = "\n".join(line.replace("MODULE", module).replace("MATRIX", f"{MATRIX} passdb={self.passdb}").replace("SET_ITEMS", SET_ITEMS)
                         for line in lines)
        (self.dir / "msso-test").write_text(text + "\n")

    def run(self, *actions, password="alice-pass", cycles=None, env=None, raw=False):
        """The driver's output (bytes with `raw`); it must have exited normally (no crash, no abort)."""
        argv = [DRIVER, self.dir, "msso-test", "alice", "--password", password]
        if cycles:
            argv += ["--cycles", str(cycles)]
        done = subprocess.run([*map(str, argv), *actions], env=dict(self.env, **(env or {})), capture_output=True,
                              timeout=120)
        assert done.returncode == 0, (done.returncode, done.stdout + done.stderr)
        return done.stdout if raw else done.stdout.decode()


def result(output, action):
    match = re.search(rf"^{action}: (.*) \((\d+)\) in (\d+) ms$", output, re.M)
    return match.group(1), int(match.group(2)), int(match.group(3))


def pam_broker(desktop, idp, **kwargs):
    """A broker running the installed mssod (which the module gives passwords to), started with the
    driver already registered: a registration written after the start is read a moment later."""
    daemon = Broker(desktop, idp, **dict({"executable": installed_mssod()}, **kwargs), start=False)
    daemon.register("pam-driver", [DRIVER], list(kwargs.get("groups") or [GROUP]))
    daemon.start()
    return daemon


@pytest.fixture
def broker(desktop, idp):
    daemon = pam_broker(desktop, idp)
    yield daemon
    daemon.stop()


@pytest.fixture
def stack(tmp_path, broker):
    return Stack(tmp_path, broker)


def test_only_the_pam_entry_points_are_exported():
    lines = subprocess.run(["nm", "-D", "--defined-only", MODULE], capture_output=True, text=True).stdout.splitlines()
    exported = {line.split()[-1] for line in lines}
    # libmsso's JSON reader is compiled in, and stays inside (no json_* for another library to meet).
    assert exported == {"pam_sm_authenticate", "pam_sm_setcred", "pam_sm_acct_mgmt", "pam_sm_open_session",
                        "pam_sm_close_session"}
    linked = subprocess.run(["ldd", MODULE], capture_output=True, text=True).stdout
    assert "swift" not in linked, "no Swift runtime inside sshd or login"
    assert "json" not in linked and "libmsso" not in linked, "the JSON reader is libmsso's, compiled in"


def test_the_modules_reading_of_a_hostile_broker_passes_its_unit_tests_under_the_sanitizers():
    """pam/tests/unit.c: broker.c and replies.c against frames a hostile broker writes on a socketpair
    (fake_broker.py's, and keys given twice), and the calls the module writes, wiped once sent."""
    done = subprocess.run(["make", "-s", "-C", ROOT / "pam", "check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "all passed" in done.stdout, done.stdout + done.stderr


def test_open_session_says_until_when_the_session_is_valid(stack, broker):
    broker.login()
    until = time.strftime("%H:%M", time.localtime(broker.status_json()["sessionExpiresAt"]))
    stack.service(["session optional MODULE"])
    out = stack.run("open_session")
    assert f"info: SSO {GROUP}: valid until {until}." in out
    assert result(out, "open_session")[:2] == ("Success", 0)


def test_open_session_says_not_logged_in_and_how_to_fix_it(stack):
    stack.service(["session optional MODULE"])
    out = stack.run("open_session")
    assert f"info: SSO {GROUP}: not logged in; run `msso login --group {GROUP}`." in out
    assert result(out, "open_session")[1] == 0


def test_open_session_says_expired_and_how_to_fix_it(tmp_path, desktop, idp):
    broker = pam_broker(desktop, idp, groups={GROUP: {"session_timeout": "1s", "session_max": "1h"}})
    try:
        broker.login()
        wait_for(lambda: broker.msso("check").returncode == 1, what="the session to expire")
        stack = Stack(tmp_path, broker)
        stack.service(["session optional MODULE group=" + GROUP])
        out = stack.run("open_session")
        assert re.search(rf"info: SSO {GROUP}: expired at \d\d:\d\d; run `msso login --group {GROUP}`.", out), out
    finally:
        broker.stop()


def test_broker_down_is_a_notice_and_never_blocks(stack, broker):
    broker.stop()
    stack.service(["session optional MODULE"])
    out = stack.run("open_session")
    assert "info: SSO: the credential broker is not reachable" in out
    name, code, ms = result(out, "open_session")
    assert code == 0 and ms < 1000


def test_a_hung_broker_costs_the_configured_timeout_at_most(stack, broker):
    broker.process.send_signal(signal.SIGSTOP)
    try:
        stack.service(["session optional MODULE timeout=300"])
        name, code, ms = result(stack.run("open_session"), "open_session")
        assert code == 0 and ms < 800, ms
    finally:
        broker.process.send_signal(signal.SIGCONT)


def test_the_login_password_logs_the_user_in_to_sso(stack, broker, desktop):
    # try_first_pass: the stack's module (pam_matrix) keeps its password to itself, so pam_msso asks.
    stack.service(["auth required MATRIX", "auth optional MODULE login try_first_pass", "session optional MODULE login"])
    out = stack.run("authenticate", "open_session")
    assert result(out, "authenticate")[1] == 0
    assert f"info: SSO {GROUP}: valid until" in out
    assert broker.msso("check").returncode == 0, "the broker has a valid session for the group"
    attributes, secret = desktop.keyring_item()
    assert secret["username"] == "alice"
    assert "alice-pass" not in out


def test_use_first_pass_takes_the_password_the_stack_read(stack, broker):
    # As after pam_unix: PAM_AUTHTOK already holds the password; pam_msso must not ask again.
    stack.service(["auth required SET_ITEMS", "auth optional MODULE login", "session optional MODULE login"])
    out = stack.run("authenticate", "open_session", password="never-asked", env={"PAM_AUTHTOK": "alice-pass"})
    assert f"info: SSO {GROUP}: valid until" in out
    assert broker.msso("check").returncode == 0


def test_without_a_password_in_the_stack_use_first_pass_does_nothing(stack, broker):
    stack.service(["auth required MATRIX", "auth optional MODULE login", "session optional MODULE login"])
    out = stack.run("authenticate", "open_session")
    assert f"info: SSO {GROUP}: not logged in" in out and "login failed" not in out
    assert broker.msso("check").returncode == 2


def test_a_password_the_idp_refuses_gives_a_clear_message_and_no_session(stack, broker, desktop):
    stack.service(["auth required MATRIX", "auth optional MODULE login try_first_pass", "session optional MODULE login"],
                  local_password="only-local-pass")
    out = stack.run("authenticate", "open_session", password="only-local-pass")
    assert result(out, "authenticate")[1] == 0, "the local login itself still succeeds"
    assert f"error: SSO {GROUP}: login failed: the identity provider" in out and "refused the username or password" in out
    assert f"info: SSO {GROUP}: not logged in" in out
    assert broker.msso("check").returncode == 2 and desktop.keyring_item() is None
    assert "only-local-pass" not in out + broker.log.read_text()


def test_enforcing_mode_fails_the_account_phase_with_the_documented_codes(tmp_path, desktop, idp):
    broker = pam_broker(desktop, idp, groups={GROUP: {"session_timeout": "1s", "session_max": "1h"}})
    try:
        stack = Stack(tmp_path, broker)
        stack.service(["account required MODULE enforce"])
        out = stack.run("acct_mgmt")
        assert result(out, "acct_mgmt")[:2] == ("Permission denied", 6), "not logged in: PAM_PERM_DENIED"
        broker.login()
        assert result(stack.run("acct_mgmt"), "acct_mgmt")[1] == 0, "valid: PAM_SUCCESS"
        wait_for(lambda: broker.msso("check").returncode == 1, what="the session to expire")
        out = stack.run("acct_mgmt")
        assert result(out, "acct_mgmt")[:2] == ("User account has expired", 13), "expired: PAM_ACCT_EXPIRED"
        assert f"SSO {GROUP}: expired at" in out
        broker.stop()
        out = stack.run("acct_mgmt")
        assert result(out, "acct_mgmt")[1] == 9, "unreachable: fails closed with PAM_AUTHINFO_UNAVAIL"
        assert "error: SSO: the credential broker is not reachable" in out
    finally:
        broker.stop()


def test_close_session_can_log_out(stack, broker):
    broker.login()
    stack.service(["session optional MODULE logout_on_close"])
    out = stack.run("close_session")
    assert "info: SSO: logged out." in out
    assert broker.msso("check").returncode == 2


def msso_login(broker, user, account=None):
    argv = ["login", "--username", user, "--password-stdin", *(["--account", account] if account else [])]
    done = broker.msso(*argv, input=PASSWORDS[user] + "\n")
    assert done.returncode == 0, done.stderr
    return json.loads(broker.msso("check", "--json", *(["--account", account] if account else [])).stdout)


def until(status):
    return time.strftime("%H:%M", time.localtime(status["sessionExpiresAt"]))


def test_open_session_shows_every_account_of_the_group(stack, broker):
    alices = msso_login(broker, "alice")
    bobs = msso_login(broker, "bob", account="admin")
    stack.service(["session optional MODULE"])
    out = stack.run("open_session")
    assert f"info: SSO {GROUP}: valid until {until(alices)}." in out, out
    assert f"info: SSO {GROUP} (account admin): valid until {until(bobs)}." in out, out
    assert broker.msso("logout", "--account", "admin").returncode == 0
    out = stack.run("open_session")
    assert f"info: SSO {GROUP}: valid until {until(alices)}." in out, out
    assert "(account admin)" not in out, out  # logged out, it is no longer one of the group's accounts


def test_the_login_password_logs_in_to_the_account_named_like_the_login_user(stack, broker, desktop):
    """bob is the group's default account; alice (the PAM user) has an account of her own name (an
    account logged out is no longer the group's: then the default gets it): her password goes
    there, not to bob's, which would refuse it."""
    msso_login(broker, "bob")
    msso_login(broker, "alice", account="alice")
    before = json.loads(broker.msso("check", "--json", "--account", "alice").stdout)["loggedInAt"]
    bobs = desktop.keyring_item()
    stack.service(LOGIN_STACK)
    out = stack.run("authenticate", "open_session")
    assert "login failed" not in out, out
    assert f"info: SSO {GROUP} (account alice): valid until" in out, out
    mine = json.loads(broker.msso("check", "--json", "--account", "alice").stdout)
    assert (mine["state"], mine["username"]) == ("valid", "alice") and mine["loggedInAt"] > before, "logged in again"
    assert desktop.keyring_item() == bobs, "the default account, bob's, untouched"


def pam_logins(broker):
    return [row for row in json.loads(broker.msso("audit", "--json").stdout)
            if row["verb"] == "login" and row["executable"] == str(DRIVER.resolve())]


def test_without_an_account_of_its_name_the_password_logs_in_to_the_default_account_once(stack, broker):
    """alice's group has her default account and bob's admin, none named alice: her password logs in
    to the default account, once (not once per account listed), and leaves admin alone."""
    alices = msso_login(broker, "alice")
    bobs = msso_login(broker, "bob", account="admin")
    wait_for(lambda: time.time() > alices["loggedInAt"] + 0.01, what="a later login time")
    stack.service(LOGIN_STACK)
    out = stack.run("authenticate", "open_session")
    assert "login failed" not in out, out
    assert f"info: SSO {GROUP}: valid until" in out and f"info: SSO {GROUP} (account admin): valid until {until(bobs)}." in out, out
    again = broker.status_json()
    assert again["username"] == "alice" and again["loggedInAt"] > alices["loggedInAt"], "logged in again by the module"
    assert len(pam_logins(broker)) == 1, "one login per group, however many accounts it has"
    assert json.loads(broker.msso("check", "--json", "--account", "admin").stdout)["loggedInAt"] == bobs["loggedInAt"]


def test_enforce_judges_each_groups_default_account(stack, broker):
    """A logged-out account beside a valid default one does not fail the account phase; the default
    account does."""
    msso_login(broker, "alice")
    msso_login(broker, "bob", account="admin")
    assert broker.msso("logout", "--account", "admin").returncode == 0
    stack.service(["account required MODULE enforce"])
    out = stack.run("acct_mgmt")
    assert result(out, "acct_mgmt")[:2] == ("Success", 0), out
    assert broker.msso("logout").returncode == 0
    out = stack.run("acct_mgmt")
    assert result(out, "acct_mgmt")[:2] == ("Permission denied", 6), out


@pytest.mark.parametrize("named", [True, False], ids=["group=", "every-group"])
def test_close_session_logs_out_every_account(stack, broker, desktop, idp, named):
    """On a shared machine the session's close ends each account, not only the default one: with
    group= (a logout names one account) as without (`all`). Every token ends at glewlwyd too."""
    msso_login(broker, "alice")
    msso_login(broker, "bob", account="admin")
    tokens = [desktop.keyring_item(group)[1][kind] for group in (GROUP, f"{GROUP}\x1fadmin")
              for kind in ("accessToken", "refreshToken")]
    SECRETS.update(tokens)
    stack.service(["session optional MODULE logout_on_close" + (f" group={GROUP}" if named else "")])
    out = stack.run("close_session")
    assert "info: SSO: logged out." in out, out
    states = [(s["account"], s["state"]) for s in json.loads(broker.msso("status", "--json").stdout)["groups"]]
    assert states == [("default", "notLoggedIn")], states  # an account logged out is no longer listed
    assert not any(idp.introspect(token)["active"] for token in tokens)


class Listener:
    """A Unix socket that records whether anyone sent it a byte."""

    def __init__(self, path):
        self.received = b""
        self.connections = 0
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.settimeout(1)
            try:
                self.received += conn.recv(4096)
            except OSError:
                pass
            conn.close()


def test_a_socket_of_another_uid_is_not_talked_to(tmp_path, broker):
    planted = tmp_path / "planted.sock"
    listener = Listener(planted)
    os.chown(planted, 65534, 65534)
    stack = Stack(tmp_path, broker, planted)
    stack.service(["session optional MODULE"])
    out = stack.run("open_session")
    assert "not reachable" in out
    assert listener.connections == 0, "the module checked the file's owner before connecting"


def test_a_daemon_of_another_uid_behind_the_users_socket_file_is_not_talked_to(tmp_path, broker):
    directory = Path(tempfile.mkdtemp(dir="/tmp"))  # reachable by uid 65534, unlike tmp_path
    directory.chmod(0o777)
    path = directory / "broker.sock"
    script = ("import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen();"
              "c,_=s.accept(); c.settimeout(2); print(len(c.recv(4096)), flush=True)")
    impostor = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "python3", "-c", script, str(path)],
                                stdout=subprocess.PIPE, text=True)
    try:
        wait_for(path.exists, what="the impostor's socket")
        os.chown(path, os.getuid(), os.getgid())  # the file looks like the user's; the process is not
        stack = Stack(tmp_path, broker, path)
        stack.service(["session optional MODULE"])
        out = stack.run("open_session")
        assert "not reachable" in out
        assert impostor.communicate(timeout=5)[0].strip() == "0", "nothing was sent to the impostor"
    finally:
        impostor.kill()


def test_a_thousand_start_end_cycles_neither_crash_nor_grow(stack, broker):
    broker.login()
    stack.service(["session optional MODULE"])
    out = stack.run("open_session", cycles=1000)
    match = re.search(r"cycles=1000 rss_kb_after_50=(\d+) rss_kb_end=(\d+)", out)
    assert match, out
    warm, end = map(int, match.groups())
    assert end - warm < 256, f"RSS grew from {warm} KB to {end} KB over 950 cycles"


def test_install_puts_the_module_where_libpam_finds_modules(tmp_path):
    subprocess.run(["make", "-s", "-C", ROOT / "pam", "install", f"DESTDIR={tmp_path}"], check=True, capture_output=True)
    libpam = subprocess.run(["pkg-config", "--variable=libdir", "pam"], capture_output=True, text=True).stdout.strip()
    installed = tmp_path / libpam.lstrip("/") / "security" / "pam_msso.so"
    assert installed.exists() and Path(f"{libpam}/security/pam_unix.so").exists(), "next to pam_unix.so"


# --- What a broker sends: nothing crashes the module, nothing raw reaches the terminal -----------

FAKE = Path(fake_broker.__file__).resolve()
LOGIN_STACK = ["auth required MATRIX", "auth optional MODULE login try_first_pass", "session optional MODULE login"]
# Control characters but the newline that ends each of the driver's lines: C0, DEL, C1.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


class FakeBroker:
    """fake_broker.py listening at `path` as `uid` (None: as the test runs, root), with a plain
    environment; `received()` is every byte it was sent."""

    def __init__(self, path, scenario, uid=None, env=None, then_exec=None, log=None):
        fd, record = tempfile.mkstemp(prefix="msso-fake-")
        os.close(fd)
        self.record = Path(record)
        if uid is not None:
            os.chown(self.record, uid, uid)
        prefix = as_uid(uid) if uid is not None else []
        options = ["--then-exec", str(then_exec)] if then_exec else []
        # A session of its own: with --then-exec, the serving child outlives the process started.
        self.process = subprocess.Popen([*prefix, PYTHON, FAKE, str(path), record, scenario, *options],
                                        env=env or {"PATH": "/usr/bin:/bin"}, start_new_session=True,
                                        stderr=open(log, "a") if log else None)
        wait_for(lambda: answers(path) or self.process.poll() is not None, what="the fake broker")
        assert self.process.poll() is None

    def received(self) -> bytes:
        return self.record.read_bytes()

    def stop(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.record.unlink()


def against_fake(tmp_path, scenario):
    """The driver's authenticate, acct_mgmt (enforce) and open_session (login) against
    fake_broker.py's `scenario`: what it printed (checked to hold no control character), and every
    byte the fake was sent."""
    path = tmp_path / "broker.sock"
    fake = FakeBroker(path, scenario)
    try:
        # mssod= the fake's own interpreter: it passes the peer check, so that what it answers to
        # the login path is heard too (this fake is the test's, and may hear the password).
        stack = Stack(tmp_path, None, path, mssod=PYTHON)
        stack.service([*LOGIN_STACK[:2], "account required MODULE enforce timeout=500",
                       "session optional MODULE login timeout=500"])
        out = stack.run("authenticate", "acct_mgmt", "open_session", raw=True)  # exited normally
        received = fake.received()
    finally:
        fake.stop()
    assert b"\x1b" not in out
    text = out.decode("utf-8")  # valid UTF-8 throughout
    assert not CONTROL.search(text), text
    assert result(text, "open_session")[:2] == ("Success", 0), text
    return text, received


@pytest.mark.parametrize("scenario", [name for name in fake_broker.SCENARIOS if name != "honest"])
def test_nothing_a_hostile_broker_sends_crashes_the_module_or_reaches_the_terminal(tmp_path, scenario):
    _, expected = fake_broker.SCENARIOS[scenario]
    text, _ = against_fake(tmp_path, scenario)
    assert expected in text, text
    if expected in (fake_broker.UNREACHABLE, fake_broker.NO_ANSWER):
        assert result(text, "acct_mgmt")[1] == 9, "enforce fails closed: PAM_AUTHINFO_UNAVAIL"
        assert "SSO com.example" not in text, "nothing of a malformed reply is shown"


def login_calls(received: bytes) -> list[dict]:
    """The arguments of every `login` call in what a fake broker was sent."""
    calls, at = [], 0
    while at + 4 <= len(received):
        length = int.from_bytes(received[at:at + 4], "big")
        call = json.loads(received[at + 4:at + 4 + length])
        at += 4 + length
        if call.get("method") == "login":
            calls.append(call["args"])
    return calls


@pytest.mark.parametrize("scenario", list(fake_broker.ACCOUNT_SCENARIOS))
def test_each_account_a_broker_lists_is_shown_and_a_name_outside_the_rule_is_no_broker(tmp_path, scenario):
    _, expected = fake_broker.ACCOUNT_SCENARIOS[scenario]
    text, received = against_fake(tmp_path, scenario)
    if expected == fake_broker.UNREACHABLE:
        assert expected in text and result(text, "acct_mgmt")[1] == 9, text
        assert "SSO com.example" not in text and not login_calls(received), "nothing of a malformed reply is shown or sent"
        return
    for line in expected:
        assert line in text, text
    opened = text.split("\nacct_mgmt: ", 1)[1]  # what the session's start showed: a line per account
    shown = [line for line in opened.splitlines() if line.startswith("info: SSO com.example")]
    assert len(shown) == {"accounts": 3, "accounts-none-the-default": 2}.get(scenario, len(shown)), text
    calls = login_calls(received)
    # The password once per group: into the account named like the login user (alice) where the
    # group has one, else into the default account, the call naming none.
    assert [call.get("account") for call in calls] == (["alice"] if scenario == "account-like-the-user" else [None]), calls
    assert all(call["username"] == "alice" and call["group"] == fake_broker.GROUP for call in calls), calls
    # enforce judges each group's default account alone; a group whose accounts name no default, all of them.
    assert result(text, "acct_mgmt")[1] == {"accounts": 0, "accounts-none-the-default": 6, "account-like-the-user": 0,
                                            "no-account-like-the-user": 6}[scenario], text


# --- Who gets the login password -----------------------------------------------------------------

@pytest.fixture
def user_desktop():
    session = Desktop(uid=USER)
    yield session
    session.cleanup()


def user_broker_of(desktop, idp, **kwargs):
    """mssod of a real user (uid USER), to which the module is root; not started."""
    secret = copy_secret(idp, desktop)
    return Broker(desktop, idp, groups={GROUP: {"client_secret_file": str(secret)}},
                  executable=installed_mssod(), start=False, **kwargs)


@pytest.fixture
def user_broker(user_desktop, idp):
    daemon = user_broker_of(user_desktop, idp)
    daemon.start()
    yield daemon
    daemon.stop()


def test_the_installed_mssod_of_a_user_gets_the_password(tmp_path, user_broker, user_desktop):
    stack = Stack(tmp_path, user_broker, uid=USER)
    stack.service(LOGIN_STACK)
    out = stack.run("authenticate", "open_session")
    assert f"info: SSO {GROUP}: valid until" in out and "not sending" not in out and "unverified" not in out, out
    assert user_broker.msso("check").returncode == 0
    assert "alice-pass" not in out + user_broker.log.read_text()


def test_a_fake_broker_of_the_user_on_the_brokers_socket_gets_no_password(tmp_path, user_broker):
    user_broker.stop()  # as malware of the user would, to take the socket's path
    fake = FakeBroker(user_broker.socket, "honest", uid=USER)
    try:
        stack = Stack(tmp_path, user_broker, uid=USER)
        stack.service(LOGIN_STACK)
        out = stack.run("authenticate", "open_session")
        received = fake.received()
    finally:
        fake.stop()
    assert (f"error: SSO: not sending your password: the program behind the broker's socket is not "
            f"{installed_mssod()}") in out, out
    assert b'"status"' in received, "the fake was asked for the status, as before"
    assert b"alice-pass" not in received and b'"login"' not in received and b"password" not in received
    assert f"info: SSO {fake_broker.GROUP}: not logged in" in out, "status lines are still shown"
    assert "info: SSO: the state shown comes from that unverified broker." in out, "as its word only"


def test_a_listener_kept_by_another_process_when_its_maker_became_mssod_gets_no_password(tmp_path, user_broker):
    """The process behind SO_PEERCRED is the real mssod here; a child of the process that made the
    listener kept a copy and accepts too. The password goes only to the process that answers."""
    user_broker.stop()
    fake = FakeBroker(user_broker.socket, "honest", uid=USER, env=user_broker.env, then_exec=installed_mssod(),
                      log=user_broker.log)
    refused = "error: SSO: not sending your password: the program behind the broker's socket is not"
    try:
        # Until mssod asks for senders' credentials on the listener: it drops connections before.
        wait_for(lambda: "listening on the socket systemd passed" in user_broker.log.read_text(), what="mssod")
        stack = Stack(tmp_path, user_broker, uid=USER)
        stack.service(LOGIN_STACK)
        fake.process.send_signal(signal.SIGSTOP)  # the child alone accepts meanwhile
        try:
            alone = [stack.run("authenticate", "open_session") for _ in range(3)]
        finally:
            fake.process.send_signal(signal.SIGCONT)
        racing = [stack.run("authenticate", "open_session") for _ in range(3)]  # whoever accepts first
        received = fake.received()
    finally:
        fake.stop()
    assert all(refused in out for out in alone), alone
    assert all(refused in out or f"info: SSO {GROUP}: valid until" in out for out in racing), racing
    assert b'"hello"' in received and b"alice-pass" not in received and b"password" not in received


# As systemd does for msso.socket: it makes the listener, starts mssod with it, and keeps it.
ACTIVATOR = r"""
import os, socket, sys
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen()
child = os.fork()
if child == 0:
    os.dup2(os.dup(listener.fileno()), 3)
    os.set_inheritable(3, True)
    os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
    os.execv(sys.argv[2], [sys.argv[2]])
os.waitpid(child, 0)
"""


def test_a_socket_activated_broker_gets_the_password(tmp_path, user_desktop, idp):
    """SO_PEERCRED names the activator (systemd), not mssod: the module judges the process that
    answers."""
    broker = user_broker_of(user_desktop, idp)
    broker.socket.parent.mkdir(mode=0o700)
    user_desktop.chown(broker.socket.parent)
    activator = subprocess.Popen([*as_uid(USER), PYTHON, "-c", ACTIVATOR, str(broker.socket), str(installed_mssod())],
                                 env=broker.env, start_new_session=True, stdout=subprocess.DEVNULL,
                                 stderr=open(broker.log, "a"))
    try:
        # Until mssod asks for senders' credentials on the listener: it drops connections before (as
        # the test above waits; waiting for the socket alone failed once here, on a loaded machine).
        wait_for(lambda: "listening on the socket systemd passed" in broker.log.read_text(), what="mssod")
        stack = Stack(tmp_path, broker, uid=USER)
        stack.service(LOGIN_STACK)
        out = stack.run("authenticate", "open_session")
        assert f"info: SSO {GROUP}: valid until" in out and "not sending" not in out, out
        assert broker.msso("check").returncode == 0
    finally:
        os.killpg(activator.pid, signal.SIGTERM)
        activator.wait()


class RecordingIssuer:
    """An OpenID provider's look-alike on 127.0.0.1: its discovery document points every endpoint
    at itself; every request (line and body) is recorded, and every POST refused."""

    def __init__(self):
        self.requests = []
        issuer = self.issuer = f"http://127.0.0.1:{free_port()}"
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                requests.append(self.requestline.encode())
                endpoints = {name: f"{issuer}/{name}" for name in
                             ("authorization_endpoint", "token_endpoint", "device_authorization_endpoint",
                              "revocation_endpoint", "jwks_uri", "userinfo_endpoint")}
                self.answer(200, dict(endpoints, issuer=issuer, grant_types_supported=["password"]))

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                requests.append(self.requestline.encode() + b"\n" + body)
                self.answer(400, {"error": "invalid_grant"})

            def answer(self, code, value):
                data = json.dumps(value).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", int(issuer.rsplit(":", 1)[1])), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


USER_GROUP = "com.example.users-own"


@pytest.mark.parametrize("uid", [USER, None], ids=["broker-of-a-user", "broker-as-root"])
def test_a_group_the_user_added_gets_no_password_and_the_admins_still_logs_in(tmp_path, idp, uid):
    """As a user's broker, mssod would refuse root's login to the user's group too (Forbidden);
    a broker running as root (no root role) would not: there the module's skipping alone counts."""
    desktop = Desktop(uid=uid)
    issuer = RecordingIssuer()
    broker = user_broker_of(desktop, idp) if uid else Broker(desktop, idp, executable=installed_mssod(), start=False)
    try:
        broker.user_dir.mkdir(parents=True, exist_ok=True)
        (broker.user_dir / "config.toml").write_text(
            f'[groups."{USER_GROUP}"]\nissuer = "{issuer.issuer}"\nclient_id = "msso"\nclient_secret = "s"\n'
            'scopes = ["openid"]\nsession_timeout = "30m"\nsession_max = "12h"\n')
        desktop.chown(desktop.home / ".config", recursive=True)
        broker.register("pam-driver", [DRIVER], [GROUP, USER_GROUP])
        broker.start()
        statuses = json.loads(broker.msso("status", "--json", prefix=[]).stdout)["groups"]
        assert {s["group"]: s.get("admin") for s in statuses} == {GROUP: True, USER_GROUP: False}, statuses
        stack = Stack(tmp_path, broker, uid=uid if uid is not None else os.getuid())
        stack.service(LOGIN_STACK)
        out = stack.run("authenticate", "open_session")
        assert f"info: SSO {GROUP}: valid until" in out, out
        assert f"info: SSO {USER_GROUP}: not logged in" in out, out
        assert f"SSO {USER_GROUP}: login failed" not in out, "skipped by the module, silently"
        assert not any(b"alice-pass" in request for request in issuer.requests), issuer.requests
        assert not any(request.startswith(b"POST") for request in issuer.requests), issuer.requests
        assert broker.msso("check", "--group", GROUP).returncode == 0
    finally:
        broker.stop()
        issuer.stop()
        desktop.cleanup()


@pytest.mark.parametrize("name, value", [("LD_PRELOAD", "libm.so.6"), ("LD_LIBRARY_PATH", "/nonexistent"),
                                         ("GCONV_PATH", "/nonexistent"), ("GIO_EXTRA_MODULES", "/nonexistent")])
def test_a_broker_started_with_code_loading_variables_gets_no_password(tmp_path, desktop, idp, name, value):
    broker = pam_broker(desktop, idp, environment={name: value})
    try:
        stack = Stack(tmp_path, broker)
        stack.service(LOGIN_STACK)
        out = stack.run("authenticate", "open_session")
        assert f"error: SSO: not sending your password: the broker was started with {name} set" in out, out
        assert f"info: SSO {GROUP}: not logged in" in out
        assert broker.msso("check").returncode == 2
    finally:
        broker.stop()


def test_a_broker_in_a_mount_namespace_of_its_own_gets_no_password(tmp_path, user_desktop, idp):
    # Of a user, so that it lists its groups to root (as an app, the driver would be a process of
    # another file system to it, and see none).
    broker = user_broker_of(user_desktop, idp, launcher=["unshare", "--mount", "--"])
    broker.start()
    try:
        stack = Stack(tmp_path, broker, uid=USER)
        stack.service(LOGIN_STACK)
        out = stack.run("authenticate", "open_session")
        assert "error: SSO: not sending your password: the broker runs in a mount namespace or root directory of its own" in out, out
        assert broker.msso("check", prefix=[]).returncode == 2, "asked as root: the user's msso is not on its file system"
    finally:
        broker.stop()


TRACER = ("import ctypes, sys, time; libc = ctypes.CDLL(None, use_errno=True);"
          "print(libc.ptrace(0x4206, int(sys.argv[1]), None, None), flush=True); time.sleep(120)")  # PTRACE_SEIZE


def test_a_traced_broker_gets_no_password(tmp_path, broker):
    tracer = subprocess.Popen([sys.executable, "-c", TRACER, str(broker.process.pid)], stdout=subprocess.PIPE, text=True)
    try:
        assert tracer.stdout.readline().strip() == "0", "attached"
        stack = Stack(tmp_path, broker)
        stack.service(LOGIN_STACK)
        out = stack.run("authenticate", "open_session")
        assert f"error: SSO: not sending your password: a debugger (pid {tracer.pid}) is attached to the broker" in out, out
        assert broker.msso("check").returncode == 2
    finally:
        tracer.kill()
        tracer.wait()


# --- Credentials forged from a user's own namespaces ---------------------------------------------

FORGER = Path(__file__).resolve().parent / "forging_broker.py"
FORGED_GROUP = fake_broker.GROUP  # the forger's one group: the administrator's, and valid
ACCOUNT_AND_LOGIN = [*LOGIN_STACK[:2], "account required MODULE enforce", LOGIN_STACK[2]]


def children(pid):
    try:
        return [int(each) for each in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def namespace(pid, name):
    return os.stat(f"/proc/{pid}/ns/{name}").st_ino


class Forger:
    """forging_broker.py as the user (USER) on `broker`'s socket, with `broker`'s environment (see
    there for `how`); `mssod` is the host's pid of the genuine mssod it started, if any."""

    def __init__(self, broker, how, named=None):
        self.files = []
        self.record, self.events = self.user_file(), self.user_file()
        argv = [PYTHON, FORGER, broker.socket, self.record, self.events, installed_mssod(), how]
        self.process = subprocess.Popen([*as_uid(USER), *map(str, argv), *([str(named)] if named else [])],
                                        env=broker.env, start_new_session=True, stderr=open(broker.log, "a"))
        wait_for(lambda: "listening" in self.events.read_text() or self.process.poll() is not None, what="the forger")
        assert self.process.poll() is None, broker.log.read_text()
        self.mssod = self.runtime = None
        if how not in ("plain", "exec-after-reply"):
            forger = int(re.search(r"^forger (\d+)$", self.events.read_text(), re.M).group(1))
            self.mssod = wait_for(lambda: self.find_mssod(forger), what="the genuine mssod, the forger's child")
            # Until it has started (it re-execs itself first): it listens in a runtime directory of its own.
            self.runtime = Path(re.search(r"^mssod \d+ (\S+)$", self.events.read_text(), re.M).group(1))
            wait_for(lambda: answers(self.runtime / "msso" / "broker.sock"), what="the forger's mssod")

    def user_file(self):
        fd, name = tempfile.mkstemp(prefix="msso-forger-")
        os.close(fd)
        os.chown(name, USER, USER)
        self.files.append(Path(name))
        return Path(name)

    def find_mssod(self, pid):
        """The first descendant of `pid` that runs the installed mssod (as the host numbers it)."""
        for child in children(pid):
            try:
                if os.readlink(f"/proc/{child}/exe") == str(installed_mssod()):
                    return child
            except OSError:
                pass
            found = self.find_mssod(child)
            if found:
                return found
        return None

    def received(self) -> bytes:
        return self.record.read_bytes()

    def said(self) -> str:
        return self.events.read_text()

    def stop(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the forger's pid namespace dies with its pid 1
        except ProcessLookupError:
            pass
        self.process.wait()
        for runtime in [self.runtime, *re.findall(r"^exec \d+ (\S+)$", self.said(), re.M)]:
            if runtime:
                shutil.rmtree(runtime, ignore_errors=True)
        for each in self.files:
            each.unlink()


def nothing_sent(received):
    return b"alice-pass" not in received and b'"login"' not in received and b"password" not in received


@pytest.mark.parametrize("how", ["pidns", "nested"])
def test_a_forger_in_a_pid_namespace_of_its_own_naming_the_real_mssod_gets_no_password(tmp_path, user_broker, how):
    """The audit's attack: malware of the user stops mssod and listens on its socket as pid 1 of a
    user and pid namespace of its own (no privilege needed), starts the genuine mssod as its child
    (or in a namespace below: `nested`) and stamps its replies with SCM_CREDENTIALS naming it. Every
    other check passes: the very file, the host's mount namespace and root, no LD_*, untraced."""
    user_broker.stop()
    forger = Forger(user_broker, how)
    try:
        stack = Stack(tmp_path, user_broker, uid=USER)
        stack.service(ACCOUNT_AND_LOGIN)
        out = stack.run("authenticate", "acct_mgmt", "open_session")
        received, said = forger.received(), forger.said()
        assert namespace(forger.mssod, "pid") != namespace(os.getpid(), "pid")
    finally:
        forger.stop()
    forged = int(re.search(r"^mssod (\d+) ", said, re.M).group(1))
    assert f"forged {forged}" in said and "refused" not in said, "the kernel let the forger name its mssod"
    assert nothing_sent(received) and b'"status"' in received, received
    # The checks before this one passed: the process named ran the installed mssod, untraced.
    assert "error: SSO: not sending your password: the broker runs in a PID namespace of its own" in out, out
    assert "error: SSO: not trusting the broker's answer: the broker runs in a PID namespace of its own" in out, out
    assert result(out, "acct_mgmt")[1] == 9, "enforce fails closed: PAM_AUTHINFO_UNAVAIL"
    assert f"info: SSO {FORGED_GROUP}: valid until" in out, "session open still shows the broker's word"
    assert "info: SSO: the state shown comes from that unverified broker." in out, out


def test_enforce_believes_only_the_installed_mssod(tmp_path, user_broker):
    """Any process of the user can listen on the socket and answer "valid": the account phase
    fails closed on its word, as when no broker answers; the verified mssod's word still counts."""
    stack = Stack(tmp_path, user_broker, uid=USER)
    stack.service(["account required MODULE enforce", "session optional MODULE logout_on_close"])
    # The verified mssod:
    assert user_broker.login().returncode == 0
    out = stack.run("acct_mgmt")
    assert result(out, "acct_mgmt")[1] == 0 and "not trusting" not in out, out
    user_broker.stop()
    forger = Forger(user_broker, "plain")
    try:
        out = stack.run("acct_mgmt", "open_session", "close_session")
        received = forger.received()
    finally:
        forger.stop()
    why = f"the program behind the broker's socket is not {installed_mssod()}"
    account, session = out.split("\nacct_mgmt: ", 1)
    assert f"error: SSO: not trusting the broker's answer: {why}" in account, out
    assert result(out, "acct_mgmt")[:2] == ("Authentication service cannot retrieve authentication info", 9), out
    assert f"SSO {FORGED_GROUP}" not in account, "nothing of what it said is shown as the state"
    assert b'"status"' in received
    assert f"info: SSO {FORGED_GROUP}: valid until" in session, "session open shows it, as its word:"
    assert f"info: SSO: the state shown comes from an unverified broker: {why}" in session, out
    assert f"info: SSO: the logout was answered by an unverified broker: {why}" in out, out
    assert "SSO: logged out." not in out


def test_a_module_running_as_the_user_cannot_examine_mssod_so_enforce_fails_closed(user_broker):
    """As in a screen locker's stack: the module runs as the user, who may not read the /proc files
    of a non-dumpable mssod. It says so, rather than calling mssod something it is not."""
    assert user_broker.login().returncode == 0
    directory = Path(tempfile.mkdtemp(prefix="msso-pam-"))  # readable by the user, unlike tmp_path
    try:
        directory.chmod(0o755)
        stack = Stack(directory, user_broker, uid=USER)
        stack.service(["account required MODULE enforce"])
        for each in directory.rglob("*"):
            each.chmod(0o755 if each.is_dir() else 0o644)
        argv = [DRIVER, stack.dir, "msso-test", "alice", "--password", "unused", "acct_mgmt"]
        out = subprocess.run([*as_uid(USER), *map(str, argv)], env=stack.env, capture_output=True, text=True,
                             timeout=60).stdout
    finally:
        shutil.rmtree(directory)
    assert "error: SSO: not trusting the broker's answer: the broker's process cannot be examined (that takes root)" in out, out
    assert result(out, "acct_mgmt")[1] == 9


def test_a_user_namespace_alone_cannot_name_a_process_of_the_hosts_pid_namespace(tmp_path, user_broker):
    """Why a pid of the module's own pid namespace is unforgeable: a forger in a user namespace of
    its own but in the host's pid namespace asks the kernel to name its mssod child (a process of the
    host's pid namespace): refused (EPERM), so the replies carry the forger's own pid."""
    user_broker.stop()
    forger = Forger(user_broker, "userns-only")
    try:
        stack = Stack(tmp_path, user_broker, uid=USER)
        stack.service(ACCOUNT_AND_LOGIN)
        out = stack.run("authenticate", "acct_mgmt", "open_session")
        received, said = forger.received(), forger.said()
        assert namespace(forger.mssod, "pid") == namespace(os.getpid(), "pid")
    finally:
        forger.stop()
    assert "refused EPERM" in said and not re.search("^forged ", said, re.M), said
    why = f"the program behind the broker's socket is not {installed_mssod()}"
    assert f"error: SSO: not sending your password: {why}" in out, out
    assert f"error: SSO: not trusting the broker's answer: {why}" in out, out
    assert nothing_sent(received), received


def test_a_forger_in_a_pid_namespace_cannot_name_the_real_mssod_running_beside_it(tmp_path, user_broker):
    """The real mssod runs, verified, in the host's pid namespace; the forger (pid 1 of a namespace
    of its own) names its pid: the kernel looks pids up in the forger's namespace, where the real
    mssod has none (ESRCH), so the replies carry the forger's own pid."""
    real = user_broker.process.pid
    forger = Forger(user_broker, "host-pid", named=real)  # takes the socket's path from the running mssod
    try:
        stack = Stack(tmp_path, user_broker, uid=USER)
        stack.service(ACCOUNT_AND_LOGIN)
        out = stack.run("authenticate", "acct_mgmt", "open_session")
        received, said = forger.received(), forger.said()
    finally:
        forger.stop()
    assert "refused ESRCH" in said and not re.search("^forged ", said, re.M), said
    why = f"the program behind the broker's socket is not {installed_mssod()}"
    assert f"error: SSO: not sending your password: {why}" in out, out
    assert result(out, "acct_mgmt")[1] == 9
    assert nothing_sent(received), received
    assert user_broker.alive()


def test_a_process_that_wrote_the_replies_then_became_mssod_gets_no_password(tmp_path, user_broker):
    """The kernel names the process that wrote, and the check sees what it runs by the time it looks:
    malware writes the replies to hello and status before they are asked for (with signals the
    module reads past in between), then execs the genuine mssod, while a child of it keeps the
    connection to read the password. The exec won the race against the check in about half the
    attempts here; without the module's ping after the check, the child read the password in 5 runs
    of this test out of 5. The process checked must now answer once more after the check, which
    mssod does not do on a connection it never accepted. The forger also writes the answers to
    the module's next calls in advance (an outside attack did, with counted serials: the password
    went out); serials are random, so an answer written before its call matches none."""
    user_broker.stop()
    stack = Stack(tmp_path, user_broker, uid=USER)
    stack.service([*LOGIN_STACK[:2], "session optional MODULE login timeout=500"])
    lost = ("not sending your password: the program behind the broker's socket is not",  # the check came first
            "not sending your password: the broker's process did not answer again once checked",  # the exec did
            # Answers written before their calls: the module draws each call's serial at random and
            # takes an answer to a call it never made as no broker at all.
            "SSO: the credential broker is not reachable")
    for _ in range(6):
        forger = Forger(user_broker, "exec-after-reply")
        try:
            out = stack.run("authenticate", "open_session")
            wait_for(lambda: "closed" in forger.said(), what="the end of the connection")
            received = forger.received()
        finally:
            forger.stop()
        assert nothing_sent(received), received
        assert any(sentence in out for sentence in lost), out


# Run as root before the drop to the user: a user namespace mapping every uid and gid to itself
# (root's, so that mssod, seeing root as root and the administrator's files as root's, serves the
# module as usual), without a pid or mount namespace of its own.
IDENTITY_USERNS = r"""
import ctypes, os, sys
ready = os.pipe()
helper = os.fork()
if helper == 0:  # stays in the initial user namespace, where root may write any map
    os.read(ready[0], 1)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{os.getppid()}/{name}", "w") as f:
            f.write("0 0 4294967295")
    os._exit(0)
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:  # CLONE_NEWUSER
    raise OSError(ctypes.get_errno(), "unshare")
os.write(ready[1], b"x")
if os.waitpid(helper, 0)[1] != 0:
    sys.exit("the maps could not be written")
os.execvp(sys.argv[1], sys.argv[1:])
"""


def test_a_broker_in_a_user_namespace_of_its_own_gets_no_password(tmp_path, user_desktop, idp):
    """The genuine mssod, in the host's pid and mount namespaces, writing its replies itself (nothing
    forged), but in another user namespace: refused, and `enforce` does not believe it."""
    broker = user_broker_of(user_desktop, idp, launcher=[PYTHON, "-c", IDENTITY_USERNS])
    broker.start()
    try:
        mssod = broker.process.pid  # the launcher exec'd setpriv, which exec'd mssod
        assert os.readlink(f"/proc/{mssod}/exe") == str(installed_mssod())
        assert namespace(mssod, "user") != namespace(os.getpid(), "user")
        assert namespace(mssod, "pid") == namespace(os.getpid(), "pid")
        stack = Stack(tmp_path, broker, uid=USER)
        stack.service(ACCOUNT_AND_LOGIN)
        out = stack.run("authenticate", "acct_mgmt", "open_session")
        assert "error: SSO: not sending your password: the broker runs in a user namespace of its own" in out, out
        assert "error: SSO: not trusting the broker's answer: the broker runs in a user namespace of its own" in out, out
        assert result(out, "acct_mgmt")[1] == 9
        assert f"info: SSO {GROUP}: not logged in" in out, "it answered, after the login it did not get"
        assert "info: SSO: the state shown comes from that unverified broker." in out, out
    finally:
        broker.stop()


def test_in_a_user_namespace_of_the_users_own_mssod_can_be_traced_by_the_user(user_desktop, user_broker, idp):
    """Why the user namespace matters: mssod is non-dumpable, so the user cannot trace it; started in
    a user namespace the user made, it can be, since the user holds every capability there. (Such a
    mssod does not serve the module today anyway: it sees root as the overflow uid.)"""
    def traced_by_the_user(pid):
        tracer = subprocess.run([*as_uid(USER), PYTHON, "-c", TRACER.replace("time.sleep(120)", "None"), str(pid)],
                                capture_output=True, text=True, timeout=30)
        return tracer.stdout.strip()

    wait_for(lambda: "listening" in user_broker.log.read_text(), what="mssod")
    assert traced_by_the_user(user_broker.process.pid) == "-1", "non-dumpable: refused"
    user_broker.stop()
    own = subprocess.Popen([*as_uid(USER), "unshare", "--user", "--map-user=65534", "--map-group=65534", "--",
                            installed_mssod()], env=user_broker.env, stdout=subprocess.DEVNULL,
                           stderr=open(user_broker.log, "a"), start_new_session=True)
    try:
        wait_for(lambda: own.poll() is not None or os.readlink(f"/proc/{own.pid}/exe") == str(installed_mssod()),
                 what="mssod in the user's namespace")
        wait_for(lambda: own.poll() is not None or "listening" in user_broker.log.read_text().rsplit("shutting down", 1)[-1],
                 what="mssod in the user's namespace")
        assert own.poll() is None
        assert traced_by_the_user(own.pid) == "0", "attached"
    finally:
        own.kill()
        own.wait()


@pytest.mark.parametrize("how", ["symbolic link", "group-writable directory", "missing"])
def test_the_mssod_argument_must_name_a_file_only_root_can_change(tmp_path, desktop, idp, how):
    directory = Path(tempfile.mkdtemp(prefix="msso-bin-")).resolve()
    directory.chmod(0o755)
    for name in ("mssod", "mssod-idp"):
        shutil.copy2(installed_mssod().parent / name, directory / name)
    broker = pam_broker(desktop, idp, executable=directory / "mssod")
    try:
        named = directory / "mssod"
        if how == "symbolic link":
            (directory / "link").symlink_to(named)
            named = directory / "link"
        elif how == "group-writable directory":
            directory.chmod(0o775)
        else:
            named = directory / "absent"
        stack = Stack(tmp_path, broker, mssod=named)
        stack.service(LOGIN_STACK)
        out = stack.run("authenticate", "open_session")
        why = f"there is no {named}" if how == "missing" else f"{named} is not an absolute path (without symbolic links) to a file only root can change"
        assert f"error: SSO: not sending your password: {why}" in out, out
        assert broker.msso("check").returncode == 2
    finally:
        broker.stop()
        shutil.rmtree(directory)


def test_a_broker_started_from_a_file_since_replaced_gets_no_password(tmp_path, desktop, idp):
    """As after an upgrade (install writes a new file): the running broker is not the installed
    mssod any more, until it restarts."""
    directory = Path(tempfile.mkdtemp(prefix="msso-bin-")).resolve()
    directory.chmod(0o755)
    for name in ("mssod", "mssod-idp"):
        shutil.copy2(installed_mssod().parent / name, directory / name)
    broker = pam_broker(desktop, idp, executable=directory / "mssod")
    try:
        shutil.copy2(installed_mssod(), directory / "mssod.new")
        os.rename(directory / "mssod.new", directory / "mssod")
        stack = Stack(tmp_path, broker, mssod=directory / "mssod")
        stack.service(ACCOUNT_AND_LOGIN)
        out = stack.run("authenticate", "acct_mgmt", "open_session")
        why = f"the program behind the broker's socket is not {directory / 'mssod'}"
        assert f"error: SSO: not sending your password: {why}" in out, out
        assert f"error: SSO: not trusting the broker's answer: {why}" in out and result(out, "acct_mgmt")[1] == 9, out
        broker.restart()
        out = stack.run("authenticate", "open_session", "acct_mgmt")
        assert f"info: SSO {GROUP}: valid until" in out and "not sending" not in out, out
        assert result(out, "acct_mgmt")[1] == 0 and "not trusting" not in out, out
    finally:
        broker.stop()
        shutil.rmtree(directory)


def test_the_default_mssod_is_where_make_install_puts_it(tmp_path):
    for name in ["Makefile", "pam_msso.map", *[p.name for p in (ROOT / "pam").glob("*.[ch]")]]:
        shutil.copy(ROOT / "pam" / name, tmp_path / name)
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "pam" / "tests" / "pam_driver.c", tmp_path / "tests")

    def built_with(*argv):  # (the protocol's header is libmsso's, in clients/c)
        subprocess.run(["make", "-s", "-C", tmp_path, "pam_msso.so", f"MSSO_INCLUDE={ROOT / 'clients' / 'c'}", *argv],
                       check=True, capture_output=True)
        return (tmp_path / "pam_msso.so").read_bytes()

    assert b"/usr/local/bin/mssod\0" in built_with()
    assert b"/opt/msso/bin/mssod\0" in built_with("PREFIX=/opt/msso"), "a new PREFIX rebuilds the module"
    top = (ROOT / "Makefile").read_text()
    assert "PREFIX ?= /usr/local" in top and "$(MAKE) -C pam install PREFIX=$(PREFIX)" in top
    assert "$(DESTDIR)$(PREFIX)/bin $(RELEASE)/daemon/release/mssod" in top

