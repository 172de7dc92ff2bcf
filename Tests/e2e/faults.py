"""Harness helpers for the fault, peer and durability tests.

- `Desktop`: harness.Desktop on a session bus *without service activation*, optionally run as
  another uid. The stock session bus would D-Bus-activate /usr/bin/gnome-keyring-daemon (with the
  bus's own HOME) for any call to org.freedesktop.secrets, so "no Secret Service" could not be
  tested, and under load the activated daemon can win the name before the test's own keyring.
- `Broker`: harness.Broker that runs mssod (and the CLI) as the desktop's uid, and waits until
  the socket *answers*, not merely exists (after `kill -9` the stale socket file stays behind).
- `timed`, `answers`, `kill_hard`, `frozen`: small tools.
"""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import harness
from harness import BIN, SECRETS, wait_for

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir={dir}</listen>
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


class Desktop(harness.Desktop):
    """A user session on a private bus with no service activation, as `uid` (default: ours)."""

    def __init__(self, keyring=True, password="login-pw", uid=None):
        self.uid = uid
        self.prefix = [] if uid is None else as_uid(uid)
        self.home = Path(tempfile.mkdtemp(prefix="msso-home-"))
        self.runtime = self.home / "run"
        self.runtime.mkdir(mode=0o700)
        (self.home / "bus").mkdir(mode=0o700)
        bus_config = self.home / "bus.conf"
        bus_config.write_text(BUS_CONFIG.format(dir=self.home / "bus"))
        if uid is not None:
            for path in [self.home, *self.home.rglob("*")]:
                os.chown(path, uid, uid)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "LANG": "C.UTF-8",
        }
        out = subprocess.run(self.prefix + ["dbus-daemon", f"--config-file={bus_config}", "--fork",
                                            "--print-address=1", "--print-pid=1"],
                             env=self.env, check=True, capture_output=True, text=True).stdout.split()
        self.bus_address, self.bus_pid = out[0], int(out[1])
        self.env["DBUS_SESSION_BUS_ADDRESS"] = self.bus_address
        self.keyring_password = password
        self.keyring = None
        if keyring:
            try:
                self.start_keyring()
            except BaseException:
                self.cleanup()
                raise

    def start_keyring(self):
        self.keyring = subprocess.Popen(self.prefix + ["gnome-keyring-daemon", "--foreground", "--unlock",
                                                       "--components=secrets"],
                                        env=self.env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self.keyring.stdin.write(self.keyring_password.encode())
        self.keyring.stdin.close()
        wait_for(lambda: self.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.secrets",
                                   "--object-path", "/org/freedesktop/secrets/aliases/default", "--method",
                                   "org.freedesktop.DBus.Properties.Get", "org.freedesktop.Secret.Collection",
                                   "Locked"]).stdout.strip() == "(<false>,)", what="an unlocked keyring")

    def stop_keyring(self):
        if self.keyring:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.keyring.pid, signal.SIGCONT)  # a stopped process could not die
            self.keyring.kill()
            self.keyring.wait()
            self.keyring = None

    def run(self, argv, **kwargs):
        return super().run(self.prefix + list(argv), **kwargs)

    def chown(self, path):
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)


class Broker(harness.Broker):
    """mssod as the desktop's user; start() returns once the socket accepts connections."""

    def start(self):
        log = open(self.log, "a")
        self.process = subprocess.Popen([*self.desktop.prefix, BIN / "mssod", *self.args], env=self.env,
                                        stdout=log, stderr=log)
        wait_for(lambda: answers(self.socket) or self.process.poll() is not None, what="mssod's socket")
        assert self.process.poll() is None, f"mssod exited: {self.log.read_text()}"

    def stop(self, sig=signal.SIGTERM):
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=10)
        self.process = None

    def msso(self, *argv, input=None, binary="msso", timeout=60, prefix=None):
        """The CLI as the desktop's user (or with another `prefix`, e.g. [] for root)."""
        prefix = self.desktop.prefix if prefix is None else prefix
        done = subprocess.run([*prefix, BIN / binary, *map(str, argv)], env=self.env, input=input,
                              capture_output=True, text=True, timeout=timeout)
        for line in done.stdout.splitlines():
            if line.startswith("Authorization: Bearer "):
                SECRETS.add(line.split(" ", 2)[2])
            elif ": " in line and len(line) > 100:
                SECRETS.add(line.split(": ", 1)[1])
        return done

    def alive(self):
        return self.process is not None and self.process.poll() is None


def answers(path) -> bool:
    """Whether something accepts connections on the Unix socket `path`."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


def timed(fn, *args, **kwargs):
    """(fn's result, seconds it took)."""
    started = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - started


def kill_hard(broker):
    """kill -9 of mssod, leaving its stale socket file behind as a crash would."""
    broker.process.kill()
    broker.process.wait(timeout=10)
    broker.process = None


@contextlib.contextmanager
def frozen(pid):
    """SIGSTOP `pid` for the block; SIGCONT it however the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def copy_secret(idp, desktop) -> Path:
    """The IdP's client secret, copied where the desktop's user can read it."""
    target = desktop.home / "client_secret"
    shutil.copyfile(idp.secret_file, target)
    target.chmod(0o600)
    desktop.chown(target)
    return target
