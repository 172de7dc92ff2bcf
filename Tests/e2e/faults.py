"""Small tools for the fault, peer and durability tests (the real parts are in harness.py)."""
import contextlib
import hashlib
import os
import shutil
import signal
import time
from pathlib import Path

import harness


def login_bounded(broker, timeout, user="alice"):
    """A password login whose CLI is given `timeout` seconds (TimeoutExpired past that)."""
    return broker.msso("login", "--username", user, "--password-stdin", input=harness.PASSWORDS[user] + "\n",
                       timeout=timeout)


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
    """SIGSTOP `pid` for the block, entered once every thread of it has stopped (a signal is only
    pending when kill returns: a thread running on another CPU could still answer); SIGCONT it
    however the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        harness.wait_for(lambda: all_stopped(pid), what=f"process {pid} to stop")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def all_stopped(pid) -> bool:
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            # The state follows the command's closing parenthesis.
            if (task / "stat").read_text().rpartition(")")[2].split()[0] not in ("T", "t"):
                return False
    return True


def copy_secret(idp, desktop) -> Path:
    """The IdP's client secret, copied where the desktop's user can read it."""
    target = desktop.home / "client_secret"
    shutil.copyfile(idp.secret_file, target)
    target.chmod(0o600)
    desktop.chown(target)
    return target


def rescue_key(desktop, group=harness.GROUP) -> str:
    """The kernel key a refresh's answer is kept under for `group` by the desktop's mssod: named
    by a digest of its state directory, so that mssods of one uid (this suite's, as root) keep
    theirs apart."""
    state = str(desktop.home / ".local" / "state" / "msso")
    return f"msso:rescue:{hashlib.sha256(state.encode()).hexdigest()[:12]}:{group}"


def kept_refresh_answer(desktop, group=harness.GROUP) -> bool:
    """Whether a refresh's answer is kept for `group` in the kernel keyring (mssod-idp keeps it
    until mssod has stored it), looked for as the desktop's user."""
    script = f'home=$(keyctl get_persistent @s) && keyctl search "$home" user "{rescue_key(desktop, group)}"'
    return desktop.run(["keyctl", "session", "-", "sh", "-c", script]).returncode == 0


def children(pid):
    """A process's children, by pid."""
    return [int(child) for path in Path(f"/proc/{pid}/task").glob("*/children") for child in path.read_text().split()]


def idp_helpers(pid):
    """mssod's children that are running mssod-idp (its IdP requests), by pid."""
    found = []
    for child in children(pid):
        try:
            if Path(f"/proc/{child}/exe").resolve().name == "mssod-idp":
                found.append(child)
        except OSError:
            pass  # ended meanwhile
    return found
