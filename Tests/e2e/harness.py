"""The real parts msso's end-to-end tests run against, started and stopped by the tests themselves.

- `IdP`: a private glewlwyd (scripts/idp) on 127.0.0.1.
- `Desktop`: a private session bus with a real gnome-keyring-daemon, in a throwaway HOME.
- `Broker`: mssod on that desktop, with helpers to run the msso CLI against it.

Every secret the tests handle (tokens, passwords, client secrets) is recorded in SECRETS, and every
daemon log in LOGS, so the last test can check that no secret ever reached a log.
"""
import array
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("MSSO_BIN", ROOT / ".build" / "debug"))
GROUP = "com.example.suite"
PASSWORDS = {"alice": "alice-pass", "bob": "bob-pass"}

PYTHON = Path(sys.executable).resolve()  # the interpreter behind the Python clients (and RawClient)

SECRETS: set[str] = set(PASSWORDS.values())
LOGS: list[Path] = []
# Outside every test's HOME (which teardown deletes), so the last test can read them all.
LOG_DIR = Path(tempfile.mkdtemp(prefix="msso-logs-"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=10.0, interval=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def stacks(pid) -> str:
    """Where each thread of a process is (gdb, from scripts/setup), for a test that waited in vain."""
    if not shutil.which("gdb"):
        return "(no gdb)"
    try:
        done = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 16"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        return f"(gdb failed: {error})"
    return "\n".join(line for line in done.stdout.splitlines() if line.startswith(("Thread ", "#"))) or done.stderr[-500:]


def sleep_until(moment: float):
    """Sleeps until the wall clock passes `moment` (a time.time() a daemon reported: an expiry, say)."""
    time.sleep(max(0.0, moment - time.time()))


def memory(pid):
    """VmRSS and VmHWM of a process, in KiB."""
    values = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def unread(sock) -> int:
    """What this end of a Unix stream socket wrote that the other end has not read yet (SIOCOUTQ:
    the kernel charges a frame to its writer until the reader has taken all of it); 0 once the
    daemon has read everything sent on the socket."""
    count = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, count)
    return count[0]


class IdP:
    """A real OpenID Connect provider (glewlwyd) on 127.0.0.1."""

    def __init__(self, token_ttl=3600, dpop_nonce=False, signing_key=None, resources=None, refresh_one_use="always"):
        """`signing_key`: a P-256 private key's PEM file to sign ID tokens with (else a new key).
        `resources`: the URLs (RFC 8707) the clients may ask tokens for, each becoming a token's
        `aud` (none: `resource` is ignored). `refresh_one_use`: "always" (each refresh rotates its
        refresh token) or "never" (one refresh token for its lifetime)."""
        self.dir = Path(tempfile.mkdtemp(prefix="msso-idp-"))
        self.port = free_port()
        self.resources = list(resources or [])
        env = dict(os.environ, IDP_ACCESS_TOKEN_TTL=str(token_ttl), IDP_DPOP_NONCE="1" if dpop_nonce else "0",
                   IDP_RESOURCES=" ".join(self.resources), IDP_REFRESH_ONE_USE=refresh_one_use)
        if signing_key:
            env["IDP_SIGNING_KEY"] = str(signing_key)
        self.issuer = subprocess.run([ROOT / "scripts" / "idp", "start", self.dir, str(self.port)], env=env,
                                     check=True, capture_output=True, text=True).stdout.strip()
        self.secret_file = self.dir / "client_secret"
        SECRETS.add(self.secret_file.read_text())

    def approve_device(self, user_code, user="alice"):
        subprocess.run([ROOT / "scripts" / "idp", "approve-device", self.dir, user_code, user, PASSWORDS[user]],
                       check=True, capture_output=True)

    def introspect(self, token) -> dict:
        """glewlwyd's RFC 7662 answer on one of client msso's tokens (access or refresh), e.g.
        {"active": true, "aud": ..., ...}; {"active": false} for a dead or unknown one."""
        import requests
        answer = requests.post(f"{self.issuer}/introspect", data={"token": token},
                               auth=("msso", self.secret_file.read_text()), timeout=5)
        assert answer.status_code == 200, (answer.status_code, answer.text)
        return answer.json()

    def admin(self):
        """A session logged in to glewlwyd's admin API, and the API's base URL."""
        import requests  # the harness itself needs nothing outside the standard library
        session = requests.Session()
        base = self.issuer.rsplit("/oidc", 1)[0]
        assert session.post(f"{base}/auth/", json={"username": "admin", "password": "password"}, timeout=5).status_code == 200
        return session, base

    def allow_redirect(self, uri, client_id="msso"):
        """Registers one more redirect URI for a client, through glewlwyd's admin API (a test's
        browser login on a port of its own, so that runs in parallel do not meet on 4600)."""
        session, base = self.admin()
        client = session.get(f"{base}/client/{client_id}", timeout=5).json()
        client["redirect_uri"] = [*client["redirect_uri"], uri]
        for member in ("source", "last_seen", "enabled_at"):
            client.pop(member, None)
        answer = session.put(f"{base}/client/{client_id}", json=client, timeout=5)
        assert answer.status_code == 200, answer.text

    def add_user(self, username, password):
        """One more user at the IdP (another than alice and bob: one named as a Unix account of the
        machine, say), with every scope of the test client; idempotent."""
        session, base = self.admin()
        if session.get(f"{base}/user/{username}", timeout=5).status_code == 200:
            return
        answer = session.post(f"{base}/user/", timeout=5, json={
            "username": username, "password": password, "name": username, "email": f"{username}@example.test",
            "enabled": True, "scope": ["openid", "app1", "app2", "profile"]})
        assert answer.status_code == 200, answer.text
        PASSWORDS.setdefault(username, password)
        SECRETS.add(password)

    def add_client(self, client_id, pubkey_pem):
        """Registers a confidential client that authenticates with private_key_jwt, by its public
        key (PEM), through glewlwyd's admin API."""
        session, base = self.admin()
        answer = session.post(f"{base}/client/", timeout=5, json={
            "client_id": client_id, "name": client_id, "enabled": True, "confidential": True,
            "token_endpoint_auth_method": ["private_key_jwt"], "pubkey": pubkey_pem,
            "authorization_type": ["code", "password", "refresh_token"],
            "redirect_uri": ["http://127.0.0.1:4600/callback"], "scope": ["openid", "app1", "app2"]})
        assert answer.status_code == 200, answer.text

    def pid(self) -> int:
        return int((self.dir / "glewlwyd.pid").read_text())

    def stop(self):
        subprocess.run([ROOT / "scripts" / "idp", "stop", self.dir], check=False)

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={dir}/socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


def as_uid(uid, *caps):
    """A setpriv prefix that runs a command as `uid` (and its gid), keeping only `caps` (ambient)."""
    prefix = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    for cap in caps:
        prefix += [f"--inh-caps=+{cap}", f"--ambient-caps=+{cap}"]
    return prefix + ["--"]


# Unlocks gnome-keyring's login collection with the password on standard input (argv[1]: the bus).
UNLOCK = """
import sys
from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
with open_dbus_connection(bus=sys.argv[1]) as bus:
    service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets")
    session = bus.send_and_get_reply(new_method_call(service.with_interface("org.freedesktop.Secret.Service"),
                                                     "OpenSession", "sv", ("plain", ("s", ""))), timeout=10).body[1]
    bus.send_and_get_reply(new_method_call(service.with_interface("org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface"),
                                           "UnlockWithMasterPassword", "o(oayays)",
                                           ("/org/freedesktop/secrets/collection/login",
                                            (session, b"", sys.stdin.read().encode(), "text/plain"))), timeout=10)
"""


# The Secret Service items whose attributes include those of the JSON object argv[2] (argv[1]: the
# bus), as JSON on standard output: each item's label, attributes, secret (text) and content type.
READ_ITEMS = """
import json, sys
from jeepney import DBusAddress, Properties, new_method_call
from jeepney.io.blocking import open_dbus_connection
with open_dbus_connection(bus=sys.argv[1]) as bus:
    service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                          interface="org.freedesktop.Secret.Service")
    session = bus.send_and_get_reply(new_method_call(service, "OpenSession", "sv", ("plain", ("s", ""))), timeout=10).body[1]
    unlocked, locked = bus.send_and_get_reply(new_method_call(service, "SearchItems", "a{ss}", (json.loads(sys.argv[2]),)),
                                              timeout=10).body
    items = []
    for path in unlocked:
        item = DBusAddress(path, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Item")
        label = bus.send_and_get_reply(Properties(item).get("Label"), timeout=10).body[0][1]
        attributes = bus.send_and_get_reply(Properties(item).get("Attributes"), timeout=10).body[0][1]
        _, _, value, content_type = bus.send_and_get_reply(new_method_call(item, "GetSecret", "o", (session,)), timeout=10).body[0]
        items.append({"label": label, "attributes": attributes, "secret": bytes(value).decode(), "contentType": content_type})
    print(json.dumps({"items": items, "locked": len(locked)}))
"""

# Writes one item into the default collection, replacing one with the same attributes (argv[1]:
# the bus; standard input: {"label", "attributes", "secret", "contentType"}), as libsecret's
# secret_service_store_sync does.
WRITE_ITEM = """
import json, sys
from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
item = json.load(sys.stdin)
with open_dbus_connection(bus=sys.argv[1]) as bus:
    service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                          interface="org.freedesktop.Secret.Service")
    session = bus.send_and_get_reply(new_method_call(service, "OpenSession", "sv", ("plain", ("s", ""))), timeout=10).body[1]
    collection = DBusAddress("/org/freedesktop/secrets/aliases/default", bus_name="org.freedesktop.secrets",
                             interface="org.freedesktop.Secret.Collection")
    properties = {"org.freedesktop.Secret.Item.Label": ("s", item["label"]),
                  "org.freedesktop.Secret.Item.Attributes": ("a{ss}", item["attributes"])}
    secret = (session, b"", item["secret"].encode(), item["contentType"])
    reply = bus.send_and_get_reply(new_method_call(collection, "CreateItem", "a{sv}(oayays)b", (properties, secret, True)),
                                   timeout=10)
    assert reply.body[1] == "/", "no prompt: the collection is unlocked"
"""


class Desktop:
    """A user session: throwaway HOME and runtime dir, a private session bus, a real keyring.

    The bus has no service activation: the stock session bus would D-Bus-activate a
    gnome-keyring-daemon of its own (with the bus's HOME) on the first call to the Secret Service,
    which could win the name before the test's keyring, and would make "no Secret Service"
    untestable. With `uid`, the bus, the keyring (and a Broker on it) run as that user. Without
    `bus`, there is no session bus at all (as over SSH on a server): no keyring either."""

    def __init__(self, keyring=True, password="login-pw", uid=None, bus=True):
        self.uid = uid
        self.extra_dirs = []  # made outside HOME (the administrator's), removed with it
        self.prefix = [] if uid is None else as_uid(uid)
        self.home = Path(tempfile.mkdtemp(prefix="msso-home-"))
        self.runtime = self.home / "run"
        self.runtime.mkdir(mode=0o700)
        (self.home / "bus").mkdir(mode=0o700)
        bus_config = self.home / "bus.conf"
        bus_config.write_text(BUS_CONFIG.format(dir=self.home / "bus"))
        self.chown(self.home, recursive=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "LANG": "C.UTF-8",
        }
        self.bus_config = bus_config
        self.bus_address, self.bus_pid = None, None
        if bus:
            self.start_bus()
        self.keyring_password = password
        self.keyring = None
        if keyring and bus:
            try:
                self.start_keyring()
            except BaseException:
                self.cleanup()  # no fixture will: the object was never handed out
                raise

    def start_bus(self):
        """The session bus, always at the same address (so that it can come back there)."""
        (self.home / "bus" / "socket").unlink(missing_ok=True)
        out = subprocess.run(self.prefix + ["dbus-daemon", f"--config-file={self.bus_config}", "--fork",
                                            "--print-address=1", "--print-pid=1"],
                             env=self.env, check=True, capture_output=True, text=True).stdout.split()
        self.bus_address, self.bus_pid = out[0], int(out[1])
        self.env["DBUS_SESSION_BUS_ADDRESS"] = self.bus_address

    def stop_bus(self):
        """Stops the session bus (and the keyring on it, which cannot live without it)."""
        self.stop_keyring()
        os.kill(self.bus_pid, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{self.bus_pid}").exists(), what="the bus to end")
        self.bus_pid = None

    def chown(self, path, recursive=False):
        if self.uid is not None:
            for each in [path, *(Path(path).rglob("*") if recursive else [])]:
                os.chown(each, self.uid, self.uid)

    def start_keyring(self, unlock=True):
        """gnome-keyring-daemon, unlocked with the login password (creates the login keyring); without
        `unlock`, as D-Bus activation starts it again after it died: its keyring locked."""
        # A session of its own, so that stopping it stops anything it forked.
        self.keyring = subprocess.Popen(self.prefix + ["gnome-keyring-daemon", "--foreground", "--components=secrets"]
                                        + (["--unlock"] if unlock else []),
                                        env=self.env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        if unlock:
            self.keyring.stdin.write(self.keyring_password.encode())
        self.keyring.stdin.close()
        wait_for(lambda: self.keyring_locked() == (not unlock), what="an unlocked keyring" if unlock else "a locked keyring")

    def keyring_locked(self):
        """True or False as the default keyring says; None when it does not answer."""
        said = self.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.secrets",
                         "--object-path", "/org/freedesktop/secrets/aliases/default", "--method",
                         "org.freedesktop.DBus.Properties.Get", "org.freedesktop.Secret.Collection",
                         "Locked"]).stdout.strip()
        return {"(<true>,)": True, "(<false>,)": False}.get(said)

    def unlock_keyring(self):
        """Unlocks the login keyring with its password, as a desktop login does (gnome-keyring's own
        D-Bus call for it: the standard Unlock would show a prompt), as the desktop's user."""
        self.run([sys.executable, "-c", UNLOCK, self.bus_address], input=self.keyring_password, check=True)
        wait_for(lambda: self.keyring_locked() is False, what="the keyring to unlock")

    def stop_keyring(self):
        if self.keyring:
            for sig in (signal.SIGCONT, signal.SIGKILL):  # a stopped process could not die
                try:
                    os.killpg(self.keyring.pid, sig)
                except ProcessLookupError:
                    pass
            self.keyring.wait()
            self.keyring = None

    def lock_keyring(self):
        self.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path",
                  "/org/freedesktop/secrets", "--method", "org.freedesktop.Secret.Service.Lock",
                  "['/org/freedesktop/secrets/collection/login']"], check=True)

    def run(self, argv, **kwargs):
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 60)
        return subprocess.run(self.prefix + list(argv), env=self.env, **kwargs)

    def keyring_item(self, group=GROUP, schema="org.msso.Credential"):
        """The broker's keyring item for a group, read with secret-tool: (attributes, secret) or None."""
        found = self.run(["secret-tool", "search", "--all", "--unlock", "xdg:schema", schema, "group", group])
        if "attribute.group" not in found.stdout + found.stderr:
            return None
        attributes = {}
        for line in (found.stdout + found.stderr).splitlines():
            if line.startswith("attribute."):
                key, _, value = line[len("attribute."):].partition(" = ")
                attributes[key] = value
            elif line.startswith("schema = "):
                attributes["xdg:schema"] = line[len("schema = "):]
        secret = self.run(["secret-tool", "lookup", "xdg:schema", schema, "group", group]).stdout
        return attributes, (json.loads(secret) if secret else None)

    def secret_items(self, **attributes):
        """Every unlocked item of the Secret Service whose attributes include `attributes`, read over
        D-Bus as the desktop's user: [{"label", "attributes", "secret", "contentType"}]."""
        done = self.run([sys.executable, "-c", READ_ITEMS, self.bus_address, json.dumps(attributes)], check=True)
        return json.loads(done.stdout)["items"]

    def store_secret_item(self, label, attributes, secret, content_type):
        """Writes an item as any program of the user can (the form another msso, say an earlier
        release, wrote its items in), replacing the one with the same attributes."""
        self.run([sys.executable, "-c", WRITE_ITEM, self.bus_address], check=True, input=json.dumps(
            {"label": label, "attributes": attributes, "secret": secret, "contentType": content_type}))

    def cleanup(self):
        self.stop_keyring()
        try:
            if self.bus_pid:
                os.kill(self.bus_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        shutil.rmtree(self.home, ignore_errors=True)
        for directory in self.extra_dirs:
            shutil.rmtree(directory, ignore_errors=True)


def admin_directory():
    """A directory the daemon counts as the administrator's: root's, 0755, under the sticky /tmp."""
    directory = Path(tempfile.mkdtemp(prefix="msso-admin-"))
    directory.chmod(0o755)
    return directory


class Broker:
    """mssod on a Desktop, configured for one IdP."""

    def __init__(self, desktop: Desktop, idp: IdP | None, groups=None, args=(), start=True, register=True,
                 executable=None, launcher=(), environment=None, admin_files=True, store=None):
        """`executable`: the mssod to run (the build's by default); `launcher`: a command it runs
        under, before the drop to the desktop's uid (e.g. `unshare --mount --`); `environment`:
        variables added to its own. `admin_files`: the groups and registrations in the stand-in
        for /etc/msso ($MSSO_SYSTEM_DIR, which only debug builds read), else in the user's own
        files: a release mssod reads the administrator's files from /etc/msso alone. `store`: the
        configuration's `store` (by default unset: `auto`)."""
        self.store = store
        self.desktop = desktop
        self.executable = Path(executable or BIN / "mssod")
        self.launcher = list(launcher)
        self.environment = dict(environment or {})
        self.socket = desktop.runtime / "msso" / "broker.sock"
        self.admin_dir = admin_directory()  # stands in for /etc/msso: root's, whatever uid the desktop runs as
        desktop.extra_dirs.append(self.admin_dir)
        self.user_dir = desktop.home / ".config" / "msso"
        self.admin_files = admin_files
        self.config = (self.admin_dir if admin_files else self.user_dir) / "config.toml"
        self.args = list(args)
        self.log = LOG_DIR / f"mssod-{len(LOGS)}.log"
        LOGS.append(self.log)
        self.process = None
        groups = groups if groups is not None else {GROUP: {}}
        self.write_config(groups, idp)
        if register:
            # The clients the tests drive, registered by the "admin" for every group.
            self.register("test-clients", [BIN / "msso", PYTHON, BIN / "App1", BIN / "App2", BIN / "Logout"], list(groups))
        if start:
            self.start()

    def register(self, name, executables, groups, admin=None, sha256=None, scopes=None, account=None):
        """An apps.d file registering executables for groups, in the admin's or the user's directory
        (by default, where the broker's configuration is); `account` pins the apps to one account
        of their groups."""
        admin = self.admin_files if admin is None else admin
        directory = (self.admin_dir if admin else self.user_dir) / "apps.d"
        directory.mkdir(parents=True, exist_ok=True)
        lines = []
        for index, executable in enumerate(executables):
            lines += [f"[apps.{name}-{index}]", f"executable = {json.dumps(str(Path(executable).resolve()))}",
                      f"groups = {json.dumps(groups)}"]
            if sha256:
                lines.append(f"sha256 = {json.dumps(sha256)}")
            if scopes is not None:
                lines.append(f"scopes = {json.dumps(scopes)}")
            if account is not None:
                lines.append(f"account = {json.dumps(account)}")
        (directory / f"{name}.toml").write_text("\n".join(lines) + "\n")
        if not admin:
            self.desktop.chown(directory.parent.parent, recursive=True)  # the user's ~/.config

    def write_config(self, groups, idp):
        lines = [f"store = {json.dumps(self.store)}"] if self.store else []
        for name, overrides in groups.items():
            values = {"issuer": idp.issuer if idp else "http://127.0.0.1:9/api/oidc", "client_id": "msso",
                      "client_secret_file": str(idp.secret_file) if idp else "/dev/null",
                      "scopes": ["openid", "app1"], "session_timeout": "30m", "session_max": "12h"}
            values.update(overrides)
            lines.append(f'[groups."{name}"]')
            lines += [f"{k} = {json.dumps(v)}" for k, v in values.items() if v is not None and not isinstance(v, dict)]  # None: key left out
            for table, entries in ((k, v) for k, v in values.items() if isinstance(v, dict)):  # a subtable: [groups."NAME".audiences]
                lines.append(f'[groups."{name}".{table}]')
                lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in entries.items()]
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text("\n".join(lines) + "\n")
        if not self.admin_files:
            self.desktop.chown(self.desktop.home / ".config", recursive=True)

    @property
    def env(self):
        return dict(self.desktop.env, MSSO_SYSTEM_DIR=str(self.admin_dir),
                    MSSO_LOG_LEVEL="debug")

    def start(self, wait=True, store=True):
        """Starts mssod and (with `wait`) waits until its socket answers and (with `store`) until
        it has chosen where sessions are kept, which it does as it starts (with a hung keyring
        that takes the keyring timeout)."""
        chosen = self.logged("sessions are kept in") if self.log.exists() else 0
        log = open(self.log, "a")
        self.process = subprocess.Popen([*self.launcher, *self.desktop.prefix, self.executable, *self.args],
                                        env=dict(self.env, **self.environment), stdout=log, stderr=log)
        if not wait:
            return
        # Until it answers: after a kill -9 the stale socket file is there before the new daemon is.
        wait_for(lambda: answers(self.socket) or self.process.poll() is not None, what="mssod's socket")
        assert self.process.poll() is None, f"mssod exited: {self.log.read_text()}"
        if store:
            # Up to three keyring calls of 5 s each when the keyring is slow (a probe, its retry on a
            # new connection, whether a locked keyring holds sessions): give it that and more.
            try:
                wait_for(lambda: self.logged("sessions are kept in") > chosen or self.process.poll() is not None,
                         timeout=30, what="mssod's choice of store")
            except TimeoutError as error:
                raise TimeoutError(f"{error}; mssod's log:\n{self.log.read_text()[-3000:]}\n"
                                   f"mssod's threads:\n{stacks(self.process.pid)}") from None

    def stop(self, sig=signal.SIGTERM):
        """Stops mssod; a daemon that ignores `sig` for 5 s is killed, and that is a test failure."""
        process, self.process = self.process, None
        if process and process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
                raise AssertionError(f"mssod (pid {process.pid}) ignored signal {sig} for 5 s; killed it")

    def restart(self):
        self.stop()
        self.start()

    def msso(self, *argv, input=None, binary="msso", timeout=60, prefix=None):
        """Runs a CLI command against this broker, as the desktop's user (or with another `prefix`,
        e.g. [] for root); records any token it prints as a secret."""
        prefix = self.desktop.prefix if prefix is None else prefix
        done = subprocess.run([*prefix, BIN / binary, *map(str, argv)], env=self.env, input=input,
                              capture_output=True, text=True, timeout=timeout)
        for line in done.stdout.splitlines():
            if line.startswith("Authorization: Bearer "):
                SECRETS.add(line.split(" ", 2)[2])
            elif ": " in line and len(line) > 100 and "essions are kept in " not in line:  # (where, not a secret)
                SECRETS.add(line.split(": ", 1)[1])
        return done

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def logged(self, words) -> int:
        """How many lines of the daemon's log so far hold `words`."""
        return sum(words in line for line in self.log.read_text(errors="replace").splitlines())

    def login(self, user="alice", password=None, group=None, account=None):
        argv = ["login", "--username", user, "--password-stdin"] + (["--group", group] if group else []) \
            + (["--account", account] if account else [])
        return self.msso(*argv, input=(password or PASSWORDS[user]) + "\n")

    def device_login(self, idp, group=None, binary=None):
        """`msso login --device` (of `group`), approved at `idp` as alice: the login that asks for a
        group's `resources` where a password login cannot (glewlwyd ignores them on the password
        grant). What it did, as `msso` returns it (the prompt is in stderr)."""
        argv = [*self.desktop.prefix, binary or BIN / "msso", "login", "--device"] + (["--group", group] if group else [])
        cli = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        prompt = cli.stderr.readline()
        if "enter the code" in prompt:
            idp.approve_device(prompt.strip().rsplit(" ", 1)[-1])
        out, err = cli.communicate(timeout=30)
        return subprocess.CompletedProcess(argv, cli.returncode, out, prompt + err)

    def status_json(self, group=GROUP):
        done = self.msso("check", "--json", "--group", group)
        return json.loads(done.stdout)


def answers(path) -> bool:
    """Whether something accepts connections on the Unix socket `path`."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


class PlantedSocket:
    """A socket another user (eve, uid 1002) listens on, in a directory everyone may write (where
    a careless MSSO_SOCKET or XDG_RUNTIME_DIR could point): it answers nothing and records every
    byte a client sends it. `received()` is what it got so far."""

    SCRIPT = r"""
import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen(16)
def take(c):
    with open(sys.argv[2], "ab", buffering=0) as log:
        while True:
            data = c.recv(65536)
            if not data: break
            log.write(data)
    with open(sys.argv[2] + ".ended", "a") as ended:
        ended.write("1\n")
while True:
    threading.Thread(target=take, args=(s.accept()[0],), daemon=True).start()
"""

    def __init__(self, uid=1002):
        self.dir = Path(tempfile.mkdtemp(prefix="msso-planted-"))
        self.dir.chmod(0o777)
        self.path = self.dir / "msso.sock"
        self.log = self.dir / "received"
        self.process = subprocess.Popen([*as_uid(uid), "/usr/bin/python3", "-c", self.SCRIPT, self.path, self.log])
        wait_for(lambda: answers(self.path), what="the planted socket")

    def received(self) -> bytes:
        """What the client sent, once it has closed its connection (all of it logged by then)."""
        ended = Path(str(self.log) + ".ended")
        wait_for(lambda: ended.exists() and ended.read_text(), timeout=5, what="the client to close its connection")
        return self.log.read_bytes() if self.log.exists() else b""

    def close(self):
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


class RawClient:
    """A bare socket speaking the wire protocol, for feeding the daemon bad input."""

    def __init__(self, path, hello=True, timeout=5):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.serial = 0
        if hello:
            assert self.call("hello", {"version": 1})["type"] == "reply"

    def send_raw(self, data: bytes):
        self.sock.sendall(data)

    def send(self, message: dict):
        self.send_raw(frame(json.dumps(message).encode()))

    def receive(self):
        """The next message, or None when the daemon closed the connection."""
        header = self._read(4)
        if header is None:
            return None
        (length,) = struct.unpack(">I", header)
        body = self._read(length)
        return None if body is None else json.loads(body)

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def call(self, method, args):
        self.serial += 1
        self.send({"type": "call", "serial": self.serial, "method": method, "args": args})
        while True:
            message = self.receive()
            if message is None or message.get("type") != "signal":
                return message

    def close(self):
        self.sock.close()
