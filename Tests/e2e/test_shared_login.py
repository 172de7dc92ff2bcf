"""One interactive login per group, joined by everyone who waits: real kubectl, msso and glewlwyd.

Tools that run in parallel (kubectl polled by an IDE, several terminals, a script's fan-out) each
start a login when the session has ended; the broker runs one device login per group and every
further login of the group joins it: one code, one approval, every caller served."""
import os
import pty
import re
import select
import signal
import sqlite3
import subprocess
import threading

import pytest

from harness import BIN, GROUP, SECRETS, Broker, sleep_until, wait_for
from test_tools import KUBECTL, kubeconfig, repos  # noqa: F401 (repos is a fixture)
from token_server import TokenServer

CODE = re.compile(r"enter the code (\S+)")


class Terminals:
    """Pseudo-terminals for many processes at once, read as they write (a full one would block them)."""

    def __init__(self):
        self.masters: dict[int, bytearray] = {}  # every terminal's output, kept after it closes
        self.open_fds: set[int] = set()
        self.lock = threading.Lock()
        self.running = True
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def open(self) -> int:
        master, slave = pty.openpty()
        with self.lock:
            self.masters[master] = bytearray()
            self.open_fds.add(master)
        return slave

    def _read(self):
        while self.running:
            with self.lock:
                fds = list(self.open_fds)
            ready, _, _ = select.select(fds, [], [], 0.05) if fds else ([], [], [])
            for fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                with self.lock:
                    if data:
                        self.masters[fd] += data
                    else:  # the process is gone (EIO): its text stays
                        self.open_fds.discard(fd)
                        os.close(fd)

    def texts(self) -> list[str]:
        with self.lock:
            return [bytes(buffer).decode(errors="replace") for buffer in self.masters.values()]

    def close(self):
        self.running = False
        self.reader.join()
        for fd in self.open_fds:
            os.close(fd)


def device_authorizations(idp) -> int:
    with sqlite3.connect(idp.dir / "glewlwyd.db") as db:
        return db.execute("SELECT count(*) FROM gpo_device_authorization").fetchone()[0]


@pytest.mark.skipif(not KUBECTL.exists(), reason="Debian's kubectl is unpacked by scripts/setup")
def test_twenty_kubectl_runs_on_an_expired_session_make_one_device_login(desktop, idp, tmp_path, repos):  # noqa: F811
    served = TokenServer(idp, repos, tls=True)
    broker = Broker(desktop, idp, groups={GROUP: {"session_timeout": "2s"}})
    terminals = Terminals()
    runs = []
    try:
        assert broker.login().returncode == 0
        sleep_until(broker.status_json()["sessionExpiresAt"] + 0.1)
        assert broker.status_json()["state"] == "expired"
        before = device_authorizations(idp)
        env = dict(broker.env, KUBECONFIG=str(kubeconfig(tmp_path / "kubeconfig", served)), HOME=str(tmp_path))
        for _ in range(20):
            # On a terminal, as a user's kubectl is: its exec plugin may then log in (kubectl 1.20
            # calls it interactive when its standard input and output are a terminal).
            tty = terminals.open()
            runs.append(subprocess.Popen([KUBECTL, "get", "namespaces"], env=env, stdin=tty, stdout=tty, stderr=tty,
                                         start_new_session=True))
            os.close(tty)
        # Every run is shown the one code: one device login, joined by the other 19.
        wait_for(lambda: all(CODE.search(text) for text in terminals.texts()) and len(terminals.texts()) == 20,
                 timeout=60, what="every kubectl run to show a device code")
        codes = {CODE.search(text).group(1) for text in terminals.texts()}
        assert len(codes) == 1, codes
        assert device_authorizations(idp) - before == 1, "one device authorization at the IdP"
        assert sum("already waiting for approval" in text for text in terminals.texts()) == 19

        idp.approve_device(codes.pop())
        for run in runs:
            assert run.wait(timeout=60) == 0, "".join(terminals.texts())[-2000:]
        wait_for(lambda: all("msso-test" in text for text in terminals.texts()), what="every run to list the namespaces")
        assert device_authorizations(idp) - before == 1
        SECRETS.update(served.seen)
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        terminals.close()
        broker.stop()
        served.close()


def start_login(broker, *argv, tty=False):
    """`msso login` (by default with no display: the device flow), its prompt read as it comes."""
    return subprocess.Popen([BIN / "msso", "login", *argv], env=broker.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def prompt_of(login) -> str:
    """The lines a login printed up to and including its device code."""
    lines = []
    while not lines or not CODE.search(lines[-1]):
        line = login.stderr.readline()
        assert line, "".join(lines)
        lines.append(line)
    return "".join(lines)


def test_a_login_that_goes_leaves_the_one_it_joined_to_the_others(broker, idp):
    # The group's account is alice's: a login that may set it (the group's first) is never joined.
    assert broker.login().returncode == 0 and broker.msso("logout").returncode == 0
    before = device_authorizations(idp)
    first = start_login(broker)
    first_prompt = prompt_of(first)
    assert "already waiting" not in first_prompt
    second = start_login(broker)
    second_prompt = prompt_of(second)
    assert second_prompt.startswith("A login of this group is already waiting for approval (started elsewhere):")
    code = CODE.search(first_prompt).group(1)
    assert CODE.search(second_prompt).group(1) == code

    first.kill()  # the terminal that started it is closed: the other still waits for the same login
    first.wait()
    third = start_login(broker)
    assert CODE.search(prompt_of(third)).group(1) == code, "still the one login"
    idp.approve_device(code)
    for login in (second, third):
        out, _ = login.communicate(timeout=30)
        assert login.returncode == 0 and f"{GROUP}: logged in" in out, out
    assert device_authorizations(idp) - before == 1


def test_when_every_caller_has_gone_the_next_login_is_a_new_one(broker, idp):
    first = start_login(broker)
    code = CODE.search(prompt_of(first)).group(1)
    first.kill()
    first.wait()
    # The login ends with its last caller: the broker logs it, and the next login has a new code.
    wait_for(lambda: broker.logged("login abandoned: everyone who waited for it left"), what="the abandoned login to end")
    again = start_login(broker)
    fresh = CODE.search(prompt_of(again)).group(1)
    assert fresh != code
    idp.approve_device(fresh)
    out, _ = again.communicate(timeout=30)
    assert again.returncode == 0, out


def test_msso_login_takes_the_device_flow_without_a_display_and_draws_a_qr_code_on_a_terminal(broker, idp):
    master, slave = pty.openpty()
    login = subprocess.Popen([BIN / "msso", "login"], env={k: v for k, v in broker.env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")},
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    shown = b""
    try:
        # Until the countdown, which comes after the whole QR code (a terminal's reads may cut it).
        while "Waiting for approval" not in shown.decode(errors="replace"):
            ready, _, _ = select.select([master], [], [], 30)
            assert ready, shown
            shown += os.read(master, 65536)
        text = shown.decode()
        assert "To log in, open" in text
        rows = [line for line in text.splitlines() if set(line.strip("\r")) <= set(" █▀▄") and "█" in line]
        assert len(rows) >= 10, text  # a QR code, drawn in half blocks
        idp.approve_device(CODE.search(text).group(1))
        out, _ = login.communicate(timeout=30)
        assert login.returncode == 0, out
    finally:
        if login.poll() is None:
            login.kill()
        os.close(master)


def test_qr_codes_are_not_drawn_off_a_terminal(broker, idp):
    login = start_login(broker)
    text = prompt_of(login)
    assert "█" not in text + login.stderr.readline()
    idp.approve_device(CODE.search(text).group(1))
    login.communicate(timeout=30)
    assert login.returncode == 0
