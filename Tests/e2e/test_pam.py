"""pam_msso, loaded by libpam (pam_start_confdir in pam/tests/pam_driver), against a real mssod,
keyring and IdP. nss_wrapper gives the PAM user `alice` the uid the test's broker runs as."""
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

import fake_broker
from harness import GROUP, PYTHON, ROOT, Broker, answers, as_uid, wait_for

DRIVER = ROOT / "pam" / "tests" / "pam_driver"
MODULE = ROOT / "pam" / "pam_msso.so"
MATRIX = "/usr/lib/x86_64-linux-gnu/pam_wrapper/pam_matrix.so"
SET_ITEMS = "/usr/lib/x86_64-linux-gnu/pam_wrapper/pam_set_items.so"  # sets PAM items from the environment


class Stack:
    """A PAM config directory with one service, and the driver to run it as `alice`. Without a
    broker (a fake one listens at `socket_path`), the driver runs with a plain environment."""

    def __init__(self, directory, broker, socket_path=None, uid=os.getuid()):
        # A broker running as root like the driver has the driver as an app, registered by
        # pam_broker; the root role against another user's broker is covered by test_peers.
        broker_env = broker.env if broker else {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        socket_path = socket_path or broker.socket
        self.dir = directory / "pam.d"
        self.dir.mkdir(exist_ok=True)
        self.socket = socket_path
        (directory / "passwd").write_text(f"alice:x:{uid}:{uid}:Alice:/home/alice:/bin/sh\n")
        (directory / "group").write_text(f"alice:x:{uid}:\n")
        self.env = dict(broker_env, LD_PRELOAD="libnss_wrapper.so", NSS_WRAPPER_PASSWD=str(directory / "passwd"),
                        NSS_WRAPPER_GROUP=str(directory / "group"))
        self.passdb = directory / "passdb"

    def service(self, lines, local_password="alice-pass"):
        self.passdb.write_text(f"alice:{local_password}:msso-test\n")
        module = f"{MODULE} socket={self.socket}"
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
    """A broker started with the driver already registered: a registration written after the start
    is read a moment later."""
    daemon = Broker(desktop, idp, start=False, **kwargs)
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
    symbols = subprocess.run(["nm", "-D", "--defined-only", MODULE], capture_output=True, text=True).stdout.split()
    exported = {name for name in symbols if name.startswith("pam_") or name.startswith("msso")}
    assert exported == {"pam_sm_authenticate", "pam_sm_setcred", "pam_sm_acct_mgmt", "pam_sm_open_session",
                        "pam_sm_close_session"}
    linked = subprocess.run(["ldd", MODULE], capture_output=True, text=True).stdout
    assert "swift" not in linked, "no Swift runtime inside sshd or login"


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
        time.sleep(1.2)
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
        time.sleep(1.2)
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
        for _ in range(100):
            if path.exists():
                break
            time.sleep(0.02)
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

    def __init__(self, path, scenario, uid=None):
        fd, record = tempfile.mkstemp(prefix="msso-fake-")
        os.close(fd)
        self.record = Path(record)
        if uid is not None:
            os.chown(self.record, uid, uid)
        prefix = as_uid(uid) if uid is not None else []
        self.process = subprocess.Popen([*prefix, PYTHON, FAKE, str(path), record, scenario],
                                        env={"PATH": "/usr/bin:/bin"})
        wait_for(lambda: answers(path) or self.process.poll() is not None, what="the fake broker")
        assert self.process.poll() is None

    def received(self) -> bytes:
        return self.record.read_bytes()

    def stop(self):
        self.process.kill()
        self.process.wait()
        self.record.unlink()


@pytest.mark.parametrize("scenario", [name for name in fake_broker.SCENARIOS if name != "honest"])
def test_nothing_a_hostile_broker_sends_crashes_the_module_or_reaches_the_terminal(tmp_path, scenario):
    _, expected = fake_broker.SCENARIOS[scenario]
    path = tmp_path / "broker.sock"
    fake = FakeBroker(path, scenario)
    try:
        stack = Stack(tmp_path, None, path)
        stack.service([*LOGIN_STACK[:2], "account required MODULE enforce timeout=500",
                       "session optional MODULE login timeout=500"])
        out = stack.run("authenticate", "acct_mgmt", "open_session", raw=True)  # exited normally
    finally:
        fake.stop()
    assert b"\x1b" not in out
    text = out.decode("utf-8")  # valid UTF-8 throughout
    assert not CONTROL.search(text), text
    assert result(text, "open_session")[:2] == ("Success", 0), text
    assert expected in text, text
    if expected in (fake_broker.UNREACHABLE, fake_broker.NO_ANSWER):
        assert result(text, "acct_mgmt")[1] == 9, "enforce fails closed: PAM_AUTHINFO_UNAVAIL"
        assert "SSO com.example" not in text, "nothing of a malformed reply is shown"
