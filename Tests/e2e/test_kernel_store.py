"""Sessions without a Secret Service: the kernel keyring (keyrings(7)), real, with no session bus.

Each test runs its broker as a user id of its own, so that it has a persistent keyring of its own
(the kernel keeps one per uid): nothing of root's, or of another test's, is read or left behind.
"""
import json
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from faults import copy_secret
from test_refresh import introspect
from harness import GROUP, SECRETS, Broker, Desktop, as_uid, wait_for

CREDENTIAL = f"msso:credential:{GROUP}"


def fresh_uid() -> int:
    """A user id no account has, whose persistent keyring holds nothing of an earlier run."""
    uid = random.randrange(3_000_000, 4_000_000)
    keyring(uid, "keyctl clear $home")
    return uid


def keyring(uid, script, namespace=False, input=None):
    """Runs `script` (sh) as `uid` with $home set to its persistent keyring, as a process of its
    own session keyring (so that it holds the keyring it asks for); with `namespace`, from a user
    namespace of its own, as an unprivileged program can make one."""
    command = ["keyctl", "session", "-", "sh", "-c", f"home=$(keyctl get_persistent @s) || exit 9; {script}"]
    if namespace:
        command = ["unshare", "--user", "--map-current-user", *command]
    return subprocess.run(as_uid(uid) + command, input=input, capture_output=True, text=True, timeout=30)


def payload(uid, name=CREDENTIAL):
    """The item's payload as the kernel holds it, or None when there is none."""
    done = keyring(uid, f'key=$(keyctl search $home user "{name}") && keyctl pipe $key')
    return done.stdout if done.returncode == 0 else None


@pytest.fixture
def account():
    uid = fresh_uid()
    yield uid
    keyring(uid, "keyctl clear $home")


@pytest.fixture
def server_session(account):
    """A login over SSH on a server: no session bus, no Secret Service."""
    session = Desktop(uid=account, bus=False)
    yield session
    session.cleanup()


@pytest.fixture
def server_broker(server_session, idp):
    daemon = Broker(server_session, idp, groups={GROUP: {"client_secret_file": str(copy_secret(idp, server_session))}})
    yield daemon
    daemon.stop()


def test_without_a_session_bus_a_login_lives_in_the_kernel_keyring_and_survives_a_restart(server_broker, account):
    assert "DBUS_SESSION_BUS_ADDRESS" not in server_broker.env
    done = server_broker.login()
    assert done.returncode == 0, done.stderr
    stored = json.loads(payload(account))
    assert stored["username"] == "alice" and stored["accessToken"] and stored["refreshToken"]
    SECRETS.update([stored["accessToken"], stored["refreshToken"]])

    status = server_broker.msso("status")
    assert status.returncode == 0, status.stderr
    assert f"Sessions are kept in the kernel keyring (the persistent keyring of uid {account}: in memory, kept 3d after msso last used it, never across a reboot): " \
           "`store = \"auto\"` and no Secret Service answers on the session bus (when mssod started)." in status.stdout, status.stdout
    described = json.loads(server_broker.msso("status", "--json").stdout)["store"]
    assert described["kind"] == "kernel"

    token = server_broker.msso("token")
    assert token.returncode == 0 and token.stdout.strip() == stored["accessToken"], token.stderr

    server_broker.restart()  # a new daemon: the session is read back from the kernel
    assert server_broker.status_json()["state"] == "valid"
    assert server_broker.msso("token").stdout.strip() == stored["accessToken"]

    done = server_broker.msso("logout")
    assert done.returncode == 0, done.stderr
    assert payload(account) is None, "logout removes the item"
    assert server_broker.status_json()["state"] == "notLoggedIn"


def test_doctor_says_where_sessions_are_kept_and_why(server_broker, account):
    done = server_broker.msso("doctor")
    keyring_line = done.stdout.splitlines()[1]
    assert keyring_line.startswith(f"✓ Sessions are kept in the kernel keyring (the persistent keyring of uid {account}"), done.stdout
    assert "no Secret Service answers on the session bus" in keyring_line


def test_a_damaged_item_is_reported_as_corrupt_and_logout_clears_it(server_broker, account):
    planted = keyring(account, f'keyctl padd user "{CREDENTIAL}" $home', input="{not json")
    assert planted.returncode == 0, planted.stderr
    server_broker.restart()  # it reads the store at start
    done = server_broker.msso("check", "--group", GROUP)
    assert done.returncode == 4, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == f"{GROUP}: the stored credential is damaged; run `msso logout --group {GROUP}`, then log in\n"
    assert server_broker.msso("logout", "--group", GROUP).returncode == 0
    assert payload(account) is None
    assert server_broker.login().returncode == 0, "and a login works again"


def test_a_full_quota_is_named_with_the_fix_and_the_daemon_serves_on(server_broker, account):
    # Another program of the user's has taken nearly all of the uid's key quota (20,000 bytes).
    filler = keyring(account, 'keyctl padd user filler $home', input="x" * 19_500)
    assert filler.returncode == 0, filler.stderr
    done = server_broker.login()
    assert done.returncode == 4, (done.returncode, done.stderr)
    assert "your kernel keyring quota (20000 bytes in all, /proc/sys/kernel/keys/maxbytes) is full, so msso could not store the credential" in done.stderr
    assert "log out of groups you no longer use" in done.stderr
    assert server_broker.status_json()["state"] == "notLoggedIn", "nothing half-stored"
    keyring(account, 'keyctl unlink $(keyctl search $home user filler) $home')
    assert server_broker.login().returncode == 0, "room again: the next login is stored"


def test_other_users_and_namespaces_of_the_same_user_find_nothing(server_broker, account):
    assert server_broker.login().returncode == 0
    assert payload(account) is not None
    # Another user of the machine: its own persistent keyring, and no way into this one.
    other = fresh_uid()
    assert payload(other) is None
    stolen = subprocess.run(as_uid(other) + ["keyctl", "print", str(item_serial(account))], capture_output=True, text=True)
    assert stolen.returncode != 0 and "Permission denied" in stolen.stderr, stolen.stdout
    # A user namespace the same user makes (as any program of theirs can): another keyring.
    inside = keyring(account, f'keyctl search $home user "{CREDENTIAL}"', namespace=True)
    assert inside.returncode != 0, inside.stdout


def item_serial(uid) -> int:
    return int(keyring(uid, f'keyctl search $home user "{CREDENTIAL}"').stdout)


def test_store_kernel_keeps_sessions_out_of_a_running_desktop_keyring(idp):
    account = 1000  # gnome-keyring-daemon wants an account in the password database
    keyring(account, "keyctl clear $home")
    session = Desktop(uid=account)
    daemon = Broker(session, idp, groups={GROUP: {"client_secret_file": str(copy_secret(idp, session))}}, store="kernel")
    try:
        assert daemon.login().returncode == 0
        assert payload(account) is not None
        assert session.keyring_item() is None, "nothing in the Secret Service"
        status = json.loads(daemon.msso("status", "--json").stdout)["store"]
        assert status["kind"] == "kernel" and status["reason"].startswith('`store = "kernel"` in ')
    finally:
        daemon.stop()
        session.cleanup()
        keyring(account, "keyctl clear $home")


def test_auto_takes_a_running_unlocked_desktop_keyring(broker):
    assert broker.login().returncode == 0
    assert broker.desktop.keyring_item() is not None
    status = json.loads(broker.msso("status", "--json").stdout)["store"]
    assert status["kind"] == "secret-service", status
    assert "Sessions are kept" not in broker.msso("status").stdout, "the usual place goes unsaid"


def test_auto_passes_over_a_locked_keyring_that_holds_no_session(idp):
    """Over SSH, D-Bus activation starts a keyring nobody there can unlock: sessions go to the
    kernel. (A locked keyring that holds msso's sessions keeps them: test_faults.py.)"""
    account = 1000  # gnome-keyring-daemon wants an account in the password database
    keyring(account, "keyctl clear $home")
    session = Desktop(uid=account)
    session.lock_keyring()
    daemon = Broker(session, idp, groups={GROUP: {"client_secret_file": str(copy_secret(idp, session))}})
    try:
        status = json.loads(daemon.msso("status", "--json").stdout)["store"]
        assert status == {"kind": "kernel", "place": status["place"],
                          "reason": "`store = \"auto\"` and the Secret Service's default keyring is locked and holds none of msso's items (when mssod started)"}
        assert daemon.login().returncode == 0
        assert payload(account) is not None
    finally:
        daemon.stop()
        session.cleanup()
        keyring(account, "keyctl clear $home")


OPEN_BUS = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:abstract={name}</listen>
  <auth>ANONYMOUS</auth>
  <allow_anonymous/>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


@pytest.mark.parametrize("store", ["auto", "secret-service"])
def test_a_secret_service_on_another_users_bus_is_never_used(idp, account, store):
    """Outside attack: the user's DBUS_SESSION_BUS_ADDRESS names a bus another user runs (an
    abstract socket, a stale /tmp path), which anyone may join; on it, that user's own unlocked
    gnome-keyring answers as the Secret Service. It read every token mssod stored there, and
    handed back sessions of its choosing."""
    eve = 1002  # another account of the machine (gnome-keyring-daemon wants one in the password database)
    home = Path(tempfile.mkdtemp(prefix="msso-eve-"))  # not under pytest's tmp_path: root's alone
    os.chown(home, eve, eve)
    name = f"msso-test-foreign-{account}"
    (home / "bus.conf").write_text(OPEN_BUS.format(name=name))
    eve_env = {"HOME": str(home), "PATH": os.environ["PATH"], "DBUS_SESSION_BUS_ADDRESS": f"unix:abstract={name}"}
    bus = subprocess.Popen(as_uid(eve) + ["dbus-daemon", f"--config-file={home / 'bus.conf'}", "--nofork"], env=eve_env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    keyring_daemon = None
    session = Desktop(uid=account, bus=False)
    session.env["DBUS_SESSION_BUS_ADDRESS"] = f"unix:abstract={name}"
    try:
        wait_for(lambda: subprocess.run(as_uid(eve) + ["gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                                                       "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus.GetId"],
                                        env=eve_env, capture_output=True).returncode == 0, what="eve's bus")
        keyring_daemon = subprocess.Popen(as_uid(eve) + ["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
                                          env=eve_env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        keyring_daemon.stdin.write(b"eve-pass")
        keyring_daemon.stdin.close()
        wait_for(lambda: "(<false>,)" in subprocess.run(
            as_uid(eve) + ["gdbus", "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path",
                           "/org/freedesktop/secrets/aliases/default", "--method", "org.freedesktop.DBus.Properties.Get",
                           "org.freedesktop.Secret.Collection", "Locked"], env=eve_env, capture_output=True, text=True).stdout,
                 what="eve's unlocked keyring")

        daemon = Broker(session, idp, groups={GROUP: {"client_secret_file": str(copy_secret(idp, session))}},
                        store=None if store == "auto" else store)
        try:
            done = daemon.login()
            if store == "auto":
                assert done.returncode == 0, done.stderr
                described = json.loads(daemon.msso("status", "--json").stdout)["store"]
                assert described["kind"] == "kernel", described
                assert described["reason"] == f'`store = "auto"` and the session bus is run by uid 1002, not by you (uid {account}): ' \
                                              "its Secret Service is not yours (when mssod started)", described
                assert payload(account) is not None
                # Nor does its notification server see prompts or answer `confirm`.
                assert daemon.logged("the session bus is run by uid 1002, not by this user: no desktop notifications") == 1
            else:
                assert done.returncode == 4, (done.stdout, done.stderr)
                assert "the Secret Service on this session bus is not yours" in done.stderr, done.stderr
        finally:
            daemon.stop()
        found = subprocess.run(as_uid(eve) + ["secret-tool", "search", "--all", "xdg:schema", "org.msso.Credential"],
                               env=eve_env, capture_output=True, text=True)
        assert "attribute.group" not in found.stdout + found.stderr, "nothing of the victim's reached the other user's keyring"
    finally:
        for process in (keyring_daemon, bus):
            if process:
                process.kill()
                process.wait()
        session.cleanup()
        shutil.rmtree(home, ignore_errors=True)


def test_a_quota_too_full_for_a_refresh_spends_no_refresh_token(server_session, account, idp):
    """Another program of the user's has filled the key quota: a refresh, whose answer could not be
    stored, is not made (the one-use refresh token stays unspent); the token that still works is
    served; once there is room, the refresh goes through and is stored."""
    daemon = Broker(server_session, idp, groups={GROUP: {"client_secret_file": str(copy_secret(idp, server_session)),
                                                         "refresh_lead": "3600s"}})
    try:
        # On a machine with many users, the account's line of /proc/key-users lies past its first
        # 4 KiB, which is all of it Foundation reads: mssod found no quota there and refreshed.
        far_down_key_users(account)
        assert daemon.login().returncode == 0
        stored = json.loads(payload(account))
        SECRETS.update([stored["accessToken"], stored["refreshToken"]])
        # The kernel gives back the bytes of keys it let go in its own time: measure once it has.
        used = settled_quota(account)
        filler = keyring(account, 'keyctl padd user filler $home', input="x" * (20_000 - used - 1_000))
        assert filler.returncode == 0, filler.stderr
        room = 20_000 - settled_quota(account)
        assert room < 2 * len(payload(account)) + 1_024, f"the quota leaves {room} bytes: room for a refresh's answer"
        done = daemon.msso("sign", "--url", "https://api.example.com/items")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"Authorization: Bearer {stored['accessToken']}"
        assert json.loads(payload(account))["refreshToken"] == stored["refreshToken"]
        assert introspect(idp, stored["refreshToken"]), "the refresh token was spent"
        keyring(account, 'keyctl unlink $(keyctl search $home user filler) $home')
        wait_for(lambda: quota_used(account) <= used, what="the kernel to give the filler's bytes back")
        assert daemon.msso("sign", "--url", "https://api.example.com/items").returncode == 0
        rotated = json.loads(payload(account))["refreshToken"]
        SECRETS.add(rotated)
        assert rotated != stored["refreshToken"] and introspect(idp, rotated)
    finally:
        daemon.stop()


def far_down_key_users(uid):
    """Makes /proc/key-users list more than 4 KiB before `uid`'s line: users below it (uids from
    2,000,000, below fresh_uid's, the same ones every run) are given their user keyrings."""
    def before():
        text = open("/proc/key-users").read()
        mine = text.find(f"\n{uid:5d}:")
        return mine if mine >= 0 else sum(len(line) for line in text.splitlines(True) if int(line.split(":")[0]) < uid)
    missing = max(0, (5_000 - before()) // 30 + 1)
    if missing:
        present = {int(line.split(":")[0]) for line in open("/proc/key-users")}
        uids = [u for u in range(2_000_000, 2_000_000 + missing + len(present)) if u not in present][:missing]
        script = "; ".join(f"setpriv --reuid={u} --regid={u} --clear-groups keyctl rdescribe @u >/dev/null" for u in uids)
        subprocess.run(["sh", "-c", script], check=True, timeout=60)
    assert before() > 4_096, f"/proc/key-users has {before()} bytes before uid {uid}'s line"


def settled_quota(uid) -> int:
    """Bytes of the key quota `uid` uses, once two reads 0.2 s apart agree (keys let go are given
    back by the kernel's garbage collector, a moment later)."""
    last = [None]

    def stable():
        now = quota_used(uid)
        same, last[0] = now == last[0], now
        return same
    wait_for(stable, interval=0.2, what="the key quota to settle")
    return last[0]


def quota_used(uid) -> int:
    """Bytes of the key quota `uid` uses (/proc/key-users)."""
    return int(next(line.split()[4].split("/")[0] for line in open("/proc/key-users") if line.split()[0] == f"{uid}:"))


def test_many_servers_minted_into_the_kernel_keyring_go_on_within_its_quota(server_session, account):
    """Found by an outside test: with `tokens = "per-resource"` and the kernel keyring's 20,000-byte
    quota, about ten minted tokens filled it, and every later mint was refused for good (exit 4).
    Now the tokens that end first give their place (minted again when asked for): sixteen servers,
    each signed for in turn at glewlwyd, and again the first; nothing refused, nothing lost."""
    from harness import IdP
    servers = [f"http://127.0.0.1:9/r{n}/" for n in range(16)]
    idp = IdP(resources=servers, refresh_one_use="never")
    daemon = Broker(server_session, idp, groups={GROUP: {"client_secret_file": str(copy_secret(idp, server_session)),
                                                         "resources": servers, "tokens": "per-resource"}})
    try:
        login = daemon.device_login(idp)
        assert login.returncode == 0, login.stderr
        for server in servers + servers[:1]:
            done = daemon.msso("sign", "--url", f"{server}x")
            assert done.returncode == 0, (server, done.stderr)
        stored = json.loads(payload(account))
        SECRETS.update([stored["accessToken"], stored["refreshToken"]] + [token["accessToken"] for token in stored["minted"]])
        assert 1 < len(stored["minted"]) < len(servers), "held as many as the quota takes"
        assert quota_used(account) < 20_000
    finally:
        daemon.stop()
        idp.cleanup()
