"""Who the daemon serves is decided from the kernel's peer credentials, not from what a client says.

The whole desktop (session bus, gnome-keyring-daemon, mssod) runs as uid 1000, as a real user's
would; the tests themselves run as root. A third uid (65534) is refused by the daemon itself:
it is given CAP_DAC_OVERRIDE so that the 0700 directory does not stop it first.
"""
import json
import os
import stat
import subprocess

import pytest

from faults import copy_secret
from harness import GROUP, SECRETS, Broker, Desktop, as_uid

OWNER = 1000
STRANGER = 65534
URL = "https://api.example.com/items"

# Run by /usr/bin/python3 as another uid: connect, then report every frame until the daemon closes.
PEER = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
except OSError as error:
    print(json.dumps({"errno": error.errno, "error": error.strerror}))
    sys.exit()
def read(n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
hello = json.dumps({"type": "call", "serial": 1, "method": "hello", "args": {"version": 1}}).encode()
try:
    s.sendall(struct.pack(">I", len(hello)) + hello)
except OSError:
    pass  # already closed: what was sent before the close is still readable
received = []
while True:
    try:
        head = read(4)
    except socket.timeout:
        received.append("timeout")
        break
    except ConnectionResetError:
        received.append("reset")
        break
    if head is None:
        received.append("closed")
        break
    received.append(json.loads(read(struct.unpack(">I", head)[0])))
print(json.dumps({"errno": 0, "uid": __import__("os").getuid(), "received": received}))
"""


@pytest.fixture
def user_desktop():
    session = Desktop(uid=OWNER)
    yield session
    session.cleanup()


@pytest.fixture
def user_broker(user_desktop, idp):
    secret = copy_secret(idp, user_desktop)
    daemon = Broker(user_desktop, idp, groups={GROUP: {"client_secret_file": str(secret)}})
    yield daemon
    daemon.stop()


def uid_of(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Uid:"):
            return {int(field) for field in line.split()[1:]}


def as_root(broker, *argv, **kwargs):
    return broker.msso(*argv, prefix=[], **kwargs)


def peer(broker, *caps):
    done = subprocess.run([*as_uid(STRANGER, *caps), "/usr/bin/python3", "-c", PEER, str(broker.socket)],
                          capture_output=True, text=True, timeout=20, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_whole_desktop_runs_as_the_user(user_broker, user_desktop):
    assert uid_of(user_broker.process.pid) == {OWNER}
    assert uid_of(user_desktop.keyring.pid) == {OWNER}
    assert uid_of(user_desktop.bus_pid) == {OWNER}
    directory, sock = os.stat(user_broker.socket.parent), os.stat(user_broker.socket)
    assert (directory.st_uid, stat.S_IMODE(directory.st_mode)) == (OWNER, 0o700)
    assert stat.S_ISSOCK(sock.st_mode)
    assert (sock.st_uid, stat.S_IMODE(sock.st_mode)) == (OWNER, 0o600)


def test_root_may_read_the_session_but_never_get_a_token(user_broker, user_desktop):
    assert as_root(user_broker, "check").returncode == 2
    assert json.loads(as_root(user_broker, "status", "--json").stdout)["groups"][0]["state"] == "notLoggedIn"
    assert user_broker.login().returncode == 0  # the user, as themselves
    check = as_root(user_broker, "check", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["username"] == "alice"
    assert as_root(user_broker, "status").returncode == 0
    for argv in (["sign", "--url", URL], ["extend"]):
        done = as_root(user_broker, *argv)
        assert done.returncode == 7, (argv, done.stdout, done.stderr)
        assert "root may only call status, check" in done.stderr, done.stderr
        assert "Bearer" not in done.stdout
    # A device login would have root relay a code for the user to approve: refused too.
    device = as_root(user_broker, "login", timeout=20)
    assert device.returncode == 7 and "only with the password flow" in device.stderr, device.stderr
    # The user's session is untouched and still theirs to use.
    sign = user_broker.msso("sign", "--url", URL)
    assert sign.returncode == 0 and sign.stdout.startswith("Authorization: Bearer "), sign.stderr


def test_root_may_log_the_user_in_and_out_as_pam_does(user_broker, user_desktop):
    """docs/PROTOCOL.md: root (the PAM module) may call login (password flow) and logout."""
    login = as_root(user_broker, "login", "--username", "alice", "--password-stdin", input="alice-pass\n")
    assert login.returncode == 0, login.stderr
    attributes, secret = user_desktop.keyring_item()
    SECRETS.update([secret["accessToken"], secret["refreshToken"]])
    assert user_broker.msso("check").returncode == 0
    logout = as_root(user_broker, "logout")
    assert logout.returncode == 0 and logout.stdout.strip() == f"Logged out of {GROUP}."
    assert user_desktop.keyring_item() is None


def test_another_user_is_refused_by_the_daemon_itself(user_broker):
    assert user_broker.login().returncode == 0
    # Without a capability, the 0700 directory stops uid 65534 before the daemon sees it.
    blocked = peer(user_broker)
    assert blocked == {"errno": 13, "error": "Permission denied"}, blocked
    # With CAP_DAC_OVERRIDE it reaches the socket: the daemon refuses it from SO_PEERCRED.
    reached = peer(user_broker, "dac_override")
    assert reached["uid"] == STRANGER
    received = reached["received"]
    assert isinstance(received[0], dict), f"the refused peer got no error frame, only: {received}"
    assert len(received) == 2 and received[1] in ("closed", "reset"), f"the connection stayed open: {received}"
    refusal = received[0]
    assert refusal["type"] == "error" and refusal["serial"] == 0 and refusal["error"] == "Forbidden", refusal
    assert f"uid {STRANGER}" in refusal["message"], refusal
    assert f"uid {OWNER}" in refusal["message"], refusal
    # The daemon keeps serving its user.
    assert user_broker.alive()
    sign = user_broker.msso("sign", "--url", URL)
    assert sign.returncode == 0 and sign.stdout.startswith("Authorization: Bearer "), sign.stderr
    assert user_broker.msso("status").returncode == 0
    assert f"uid={STRANGER}" in user_broker.log.read_text()
