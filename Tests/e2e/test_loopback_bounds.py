"""What a browser login's loopback redirect listener (RFC 8252, 127.0.0.1:PORT, open while
`msso login --browser` waits) can be made to hold, by another user of the machine and by the
user's own programs.

Every user can reach 127.0.0.1. The daemon (here as root, the tests' user) closes at once a
connection whose client socket belongs to another uid (the kernel's socket table says whose it
is), keeps at most 16 of its own user's open, each for at most 10 s, and closes the listener and
every connection when the login ends. Figures are printed (run with -s).
"""
import json
import os
import socket
import subprocess
import time

import pytest

from urllib.parse import parse_qs, urlparse

import requests

from harness import GROUP, Broker, as_uid, free_port, memory, wait_for
from test_bounds import mib, MIB
from test_browser_login import start_login

STRANGER = 65534  # nobody: another user of the machine
MSSOD_FILES = 4096  # mssod's descriptor limit in these tests (prlimit), so that a flood can reach it

# Run as another uid: opens `count` connections to the listener, keeps them, and reports how many
# connected, then (on each line read from stdin) how many the daemon has closed.
HOLDER = r"""
import json, socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
socks, failed, in_a_row = [], 0, 0
for _ in range(count):
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        failed += 1; in_a_row += 1; s.close()
        if in_a_row == 20: break  # nothing accepts any more
        continue
    in_a_row = 0
    s.setblocking(False)
    socks.append(s)
def closed():
    n = 0
    for s in socks:
        try:
            data = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            continue  # open, nothing to read
        except OSError:
            data = b""  # reset
        if not data: n += 1
    return n
print(json.dumps({"connected": len(socks), "failed": failed, "closed": closed()}), flush=True)
for _ in sys.stdin:
    print(json.dumps({"closed": closed()}), flush=True)
"""


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def sockets_on_port(pid, port):
    """How many of `pid`'s descriptors are TCP sockets whose local port is `port` (the listener
    and the connections it accepted), from /proc/PID/fd and /proc/net/tcp{,6}. Other descriptors
    may come and go (an HTTP client's pool, say): these are the login's."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                    count += 1
    return count


def holder(port, count, prefix=()):
    child = subprocess.Popen([*prefix, "/usr/bin/python3", "-c", HOLDER, str(port), str(count)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = child.stdout.readline()
    assert first, child.stderr.read()
    return child, json.loads(first)


def closed_by_daemon(child):
    child.stdin.write("\n")
    child.stdin.flush()
    return json.loads(child.stdout.readline())["closed"]


@pytest.fixture
def browser_broker(desktop, idp):
    """mssod whose group's browser login listens on a port of its own (the IdP's registered one,
    4600, is shared by every test run on the machine), registered at the IdP: mssod asks the
    IdP's authorization endpoint before it waits, and an unknown redirect URI ends the login."""
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    idp.allow_redirect(redirect)
    daemon = Broker(desktop, idp, groups={GROUP: {"redirect_uri": redirect}},
                    launcher=["prlimit", f"--nofile={MSSOD_FILES}:{MSSOD_FILES}", "--"])
    daemon.port = int(urlparse(daemon_redirect(daemon)).port)
    yield daemon
    daemon.stop()


def daemon_redirect(daemon):
    return next(line.split(" = ", 1)[1].strip('"') for line in daemon.config.read_text().splitlines()
                if line.startswith("redirect_uri"))


def test_another_user_holding_connections_to_the_redirect_listener(browser_broker):
    """Attack (7c): while the user's browser login waits, another user (uid 65534) opens 5,000
    connections to its loopback listener and holds them. Before: mssod accepted and kept every
    one, ran out of descriptors (here 4,096), and every `msso check` of the user failed until the
    other user let go; the descriptors stayed held after the login ended. Expected: each is closed
    at once (mssod's descriptors stay within 32 of where they were); `msso check` answers within
    1 s meanwhile; the user's own browser still completes the login through the same listener;
    once the login has ended the listener is gone. (Its browser comes back with a refusal, which
    ends the login just as well as a code.)"""
    broker = browser_broker
    pid = broker.process.pid
    before_files, before = descriptors(pid), memory(pid)
    cli, url = start_login(broker)
    attacker = None
    try:
        attacker, opened = holder(broker.port, 5000, prefix=as_uid(STRANGER))
        held_files, held = descriptors(pid), memory(pid)
        checks = []
        for _ in range(3):
            started = time.monotonic()
            done = broker.msso("check", timeout=30)
            checks.append((done.returncode, round(time.monotonic() - started, 3)))
        assert all(status == 2 and took < 1 for status, took in checks), checks  # answered: not logged in yet
        # The daemon closes each as it accepts it: wait for it to have closed them all.
        closed = wait_for(lambda: (lambda n: n if n >= opened["connected"] else 0)(closed_by_daemon(attacker)),
                          timeout=30, interval=0.2, what="the daemon to close the other user's connections")
        state = parse_qs(urlparse(url).query)["state"][0]
        landing = requests.get(f"{daemon_redirect(broker)}?error=access_denied&state={state}", timeout=5)
        out, err = cli.communicate(timeout=30)
        print(f"\nanother user's 5,000 connections to the redirect listener: {opened['connected']} connected, "
              f"{closed} closed by the daemon; mssod descriptors {before_files} before, {held_files} while held "
              f"(bound: {before_files + 32}); VmRSS {mib(before['VmRSS'])} before, {mib(held['VmRSS'])} while held "
              f"(bound: {mib(before['VmRSS'] + 32 * MIB)}); the user's msso check (exit, s): {checks}; "
              f"their browser's answer: {landing.status_code}, the login: exit {cli.returncode}")
        assert opened["connected"] >= 4000, opened
        assert held_files <= before_files + 32
        assert held["VmRSS"] < before["VmRSS"] + 32 * MIB
        assert landing.status_code == 200 and "Login refused" in landing.text
        assert cli.returncode == 6 and "refused the browser login (access_denied)" in err, err
        wait_for(lambda: sockets_on_port(pid, broker.port) == 0, what="the login's descriptors to be closed")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", broker.port), timeout=2).close()
    finally:
        if cli.poll() is None:
            cli.kill()
        if attacker:
            attacker.kill()
            attacker.wait()


def test_the_users_own_connections_are_capped_timed_out_and_closed_when_the_login_ends(browser_broker):
    """The user's own programs (root here, as mssod) may open connections to the listener, but at
    most 16 stay open (the rest are closed at once), each for at most 10 s; and when the login
    ends (here its caller goes away: the login is cancelled) every one is closed and the
    descriptors are given back."""
    broker = browser_broker
    pid = broker.process.pid
    before_files = descriptors(pid)
    cli, _ = start_login(broker)
    mine = later = None
    try:
        mine, opened = holder(broker.port, 40)
        assert opened["connected"] == 40, opened
        refused = wait_for(lambda: (lambda n: n if n >= 24 else 0)(closed_by_daemon(mine)), timeout=5,
                           what="the connections over the cap to be closed")
        kept = sockets_on_port(pid, broker.port)  # the listener and the connections it kept
        timed_out = wait_for(lambda: (lambda n: n if n == 40 else 0)(closed_by_daemon(mine)), timeout=20,
                             interval=0.5, what="the kept connections to time out")
        later, reopened = holder(broker.port, 10)
        assert wait_for(lambda: descriptors(pid) >= before_files + 10, what="the new connections to be accepted")
        assert closed_by_daemon(later) == 0
        cli.kill()  # the caller goes: the login is cancelled
        cli.wait()
        ended = wait_for(lambda: (lambda n: n if n == 10 else 0)(closed_by_daemon(later)), timeout=5,
                         what="every connection to close with the login")
        wait_for(lambda: sockets_on_port(pid, broker.port) == 0, what="the login's descriptors to be closed")
        print(f"\nthe user's own 40 connections: {refused} closed at once (cap 16), {timed_out} closed after the 10 s "
              f"deadline; mssod's sockets on the listener's port with 16 kept: {kept}; 10 more closed when the "
              f"login was cancelled ({ended}); descriptors after: {descriptors(pid)}")
        assert refused == 24
        assert kept <= 16 + 1
    finally:
        if cli.poll() is None:
            cli.kill()
        for child in (mine, later):
            if child:
                child.kill()
                child.wait()
