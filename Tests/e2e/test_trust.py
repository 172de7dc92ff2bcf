"""Attacks on who the broker takes a caller to be, against the real mssod, kernel, keyring and IdP.

A connection speaks only for the process that opened it: every call's bytes must come from that
process (SCM_CREDENTIALS, while its pidfd from SO_PEERPIDFD says it lives) and running the program
it ran when it was last read from; a socket inherited or passed is refused to whoever else writes. A registration by path
holds only for a process that sees the daemon's file system and runs the very file at that path;
a Flatpak id is read only from a process in a sandbox of its own; admin files count only when root
owns them (and everything above them). Each test says the attack and what must happen; each has a
control showing the same set-up is served when it is legitimate, so that it can fail.

The attackers are small Python scripts run by a *copy* of the interpreter (another file, so
another app as far as the kernel is concerned); the registered app is another copy.
"""
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from faults import copy_secret, frozen
from harness import BIN, GROUP, ROOT, SECRETS, Broker, Desktop, PlantedSocket, as_uid, wait_for

USER = 1000
# The system's interpreter (the harness's PYTHON may be a private one under /root): attackers and
# apps are copies of it; copies find its standard library in /usr/lib whoever runs them.
INTERPRETER = Path("/usr/bin/python3").resolve()
URL = "https://api.example.com/items"
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}

# The wire protocol in a few lines, prepended to every attacker script (run with `python -c`).
WIRE = r'''
import array, json, os, socket, struct, sys, time

def connect(path, hello=True):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(path)
    if hello:
        reply = call(s, "hello", {"version": 1, "client": "trust-test"})
        assert reply.get("type") == "reply", reply
    return s

_serial = [0]

def frame(method, args):
    _serial[0] += 1
    body = json.dumps({"type": "call", "serial": _serial[0], "method": method, "args": args}).encode()
    return struct.pack(">I", len(body)) + body

def read_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data

def receive(s):
    while True:
        try:
            head = read_exact(s, 4)
        except ConnectionResetError:
            head = None
        if head is None:
            return {"type": "closed"}
        message = json.loads(read_exact(s, struct.unpack(">I", head)[0]))
        if message.get("type") != "signal":
            return message

def call(s, method, args):
    s.sendall(frame(method, args))
    return receive(s)

def sign_frame(group):
    return frame("sign", {"group": group, "method": "GET", "url": "https://api.example.com/items"})

def sign(s, group):
    s.sendall(sign_frame(group))
    return receive(s)

def me():
    return {"pid": os.getpid(), "exe": os.readlink("/proc/self/exe"), "inode": os.stat("/proc/self/exe").st_ino}

def say(value):
    print(json.dumps(value), flush=True)

def drained(s, timeout=10):
    """Waits until the daemon has read everything sent on s (SIOCOUTQ: the kernel charges what was
    sent to its sender until the reader has taken it all)."""
    import fcntl, termios
    count, deadline = array.array("i", [0]), time.monotonic() + timeout
    while True:
        fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, count)
        if count[0] == 0:
            return
        assert time.monotonic() < deadline, f"the daemon left {count[0]} bytes unread"
        time.sleep(0.005)
'''

# argv: socket group. Connects, says hello, signs once.
SIGN_ONCE = WIRE + r'''
s = connect(sys.argv[1])
say({"me": me(), "reply": sign(s, sys.argv[2])})
'''


# MARK: helpers

def is_token(reply):
    return reply.get("type") == "reply" and "headers" in reply.get("result", {})


def remember_tokens(value):
    """Every header value a script printed is a secret the daemon's logs must never hold."""
    if isinstance(value, dict):
        if value.get("type") == "reply":
            for _, header in value.get("result", {}).get("headers", []):
                SECRETS.add(header.split(" ", 1)[-1])
        for item in value.values():
            remember_tokens(item)
    elif isinstance(value, list):
        for item in value:
            remember_tokens(item)


def last_json(stdout):
    value = json.loads(stdout.strip().splitlines()[-1])
    remember_tokens(value)
    return value


def run_script(interpreter, script, *args, prefix=(), timeout=60):
    """Runs `script` with `interpreter` (a path, or an argv prefix) and returns its last JSON line."""
    argv = [*prefix, *(interpreter if isinstance(interpreter, list) else [str(interpreter)]), "-c", script, *map(str, args)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=ENV)
    assert done.returncode == 0 and done.stdout.strip(), f"{argv[:4]}…: {done.stderr}"
    return last_json(done.stdout)


def python_copy(directory, name, uid=None):
    """A copy of the Python interpreter: the same code, another executable file."""
    directory = Path(directory)
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    target = directory / name
    shutil.copy2(INTERPRETER, target)
    target.chmod(0o755)
    if uid is not None:
        os.chown(directory, uid, uid)
        os.chown(target, uid, uid)
    return target


def register_flatpak(broker, name, app_id, groups):
    directory = broker.admin_dir / "apps.d"
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.toml").write_text(f'[apps.{name}]\nflatpak = "{app_id}"\ngroups = {json.dumps(groups)}\n')


NOT_THE_CONNECTIONS = "only the process that opened a connection may call on it"


def assert_refused(reply, error="NotEntitled", *phrases):
    assert not is_token(reply), f"a token was handed out: {reply.get('type')}"
    assert reply.get("type") == "error" and reply.get("error") == error, reply
    for phrase in phrases:
        assert phrase in reply["message"], reply["message"]


def served(reply):
    assert is_token(reply), reply
    return True


@pytest.fixture
def bare(desktop, idp):
    """A broker (as root, like the rest of the suite) with nothing registered, logged in by msso."""
    daemon = Broker(desktop, idp, register=False)
    assert daemon.login().returncode == 0, "the msso command manages every group"
    yield daemon
    os.kill(daemon.process.pid, signal.SIGCONT)  # in case a test stopped it
    daemon.stop()


@pytest.fixture
def user_desktop():
    session = Desktop(uid=USER)
    yield session
    session.cleanup()


@pytest.fixture
def user_broker(user_desktop, idp):
    """mssod as uid 1000 (as a real user's would run), nothing registered, logged in."""
    secret = copy_secret(idp, user_desktop)
    daemon = Broker(user_desktop, idp, groups={GROUP: {"client_secret_file": str(secret)}}, register=False)
    assert daemon.login().returncode == 0
    yield daemon
    os.kill(daemon.process.pid, signal.SIGCONT)
    daemon.stop()


def user_bin(user_desktop):
    directory = user_desktop.home / "bin"
    directory.mkdir(mode=0o755, exist_ok=True)
    user_desktop.chown(directory)
    return directory


class Attacker:
    """A long-running attacker script whose stdin and stdout the test drives line by line."""

    def __init__(self, argv, prefix=()):
        self.process = subprocess.Popen([*prefix, *map(str, argv)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=ENV)
        self.pending = b""

    def line(self, timeout=30):
        """The next JSON line it printed (read unbuffered: its processes write lines of their own)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0, deadline - time.monotonic()))
            assert ready, f"the attacker said nothing in {timeout} s"
            chunk = os.read(self.process.stdout.fileno(), 65536)
            assert chunk, f"the attacker ended: {self.process.stderr.read().decode()}"
            self.pending += chunk
        text, self.pending = self.pending.split(b"\n", 1)
        value = json.loads(text)
        remember_tokens(value)
        return value

    def tell(self, word):
        self.process.stdin.write(word.encode() + b"\n")
        self.process.stdin.flush()

    def end(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


# MARK: 1. exec after connect, with an accomplice keeping the socket

# argv: socket group registered tries. Says hello as itself, forks an accomplice that keeps the
# socket, then execs the registered program (which keeps the socket too); the accomplice signs.
EXEC_WITH_ACCOMPLICE = WIRE + r'''
path, group, registered, tries = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = connect(path)
hello_as = me()
os.set_inheritable(s.fileno(), True)  # the registered program holds the socket as well
done_r, done_w = os.pipe()            # done_w is closed by the exec: the accomplice's cue
if os.fork() == 0:
    os.close(done_w)
    os.read(done_r, 1)
    parent = os.getppid()
    while os.readlink(f"/proc/{parent}/exe") != registered:
        time.sleep(0.01)
    held = os.readlink(f"/proc/{parent}/fd/{s.fileno()}") == os.readlink(f"/proc/self/fd/{s.fileno()}")
    replies = [sign(s, group) for _ in range(tries)]
    say({"hello_as": hello_as, "accomplice": me(), "parent": parent, "parent_exe": os.readlink(f"/proc/{parent}/exe"),
         "parent_holds_socket": held, "replies": replies})
    os._exit(0)
os.execv(registered, [registered, "-c", "import time; time.sleep(120)"])
'''


def test_exec_after_connect_with_an_accomplice_keeping_the_socket(bare, tmp_path):
    """Attack: an unregistered process connects and says hello, forks an accomplice that keeps the
    socket, then execs a registered program (which keeps the socket too); the accomplice signs 30
    times. Expected: 0 tokens; every reply is Forbidden: the accomplice did not open the connection."""
    registered = python_copy(tmp_path, "registered-app")
    attacker = python_copy(tmp_path, "attacker")
    bare.register("registered", [registered], [GROUP])
    control = run_script(registered, SIGN_ONCE, bare.socket, GROUP)
    assert served(control["reply"]), "control: the registered program itself is served"

    process = subprocess.Popen([attacker, "-c", EXEC_WITH_ACCOMPLICE, bare.socket, GROUP, registered, "30"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 60)
        assert ready, "the accomplice reported nothing"
        result = last_json(process.stdout.readline())
    finally:
        process.kill()
        process.wait()
    assert result["hello_as"]["exe"] == str(attacker)
    assert result["parent_exe"] == str(registered) and result["parent"] == result["hello_as"]["pid"], \
        "the process that said hello really became the registered program"
    assert result["parent_holds_socket"], "and still holds the socket"
    replies = result["replies"]
    assert len(replies) == 30
    assert sum(map(is_token, replies)) == 0, "no token for the accomplice"
    for reply in replies:
        assert_refused(reply, "Forbidden", NOT_THE_CONNECTIONS, f"the call came from pid {result['accomplice']['pid']}")


# MARK: 2. a socket passed with SCM_RIGHTS

# argv: socket group receiver-interpreter receiver-script. The registered program signs, passes its
# connection to an unregistered program over a socketpair, lets it sign, then signs again itself.
PASS_SOCKET = WIRE + r'''
path, group, receiver, receiving = sys.argv[1:5]
s = connect(path)
first = sign(s, group)
mine, theirs = socket.socketpair()
child = __import__("subprocess").Popen([receiver, "-c", receiving, str(theirs.fileno()), group], pass_fds=[theirs.fileno()])
theirs.close()
socket.send_fds(mine, [b"x"], [s.fileno()])
received = json.loads(mine.makefile().readline())
child.wait()
_serial[0] = 200
after = sign(s, group)
say({"me": me(), "first": first, "receiver": received, "after": after})
'''

# argv: channel-fd group. Receives a connection over the channel, signs on it, reports back.
RECEIVE_SOCKET = WIRE + r'''
channel = socket.socket(fileno=int(sys.argv[1]))
_, fds, _, _ = socket.recv_fds(channel, 1, 1)
s = socket.socket(fileno=fds[0])
s.settimeout(30)
_serial[0] = 100
channel.sendall(json.dumps({"me": me(), "reply": sign(s, sys.argv[2])}).encode() + b"\n")
'''


def test_a_socket_passed_to_another_process_is_refused_to_it(bare, tmp_path):
    """Attack: a registered program hands its connection (SCM_RIGHTS) to an unregistered one, which
    signs on it. Expected: the receiver is refused (Forbidden: it did not open the connection);
    the registered sender's own calls on that same connection, before and after, are still served."""
    registered = python_copy(tmp_path, "registered-app")
    receiver = python_copy(tmp_path, "receiver")
    bare.register("registered", [registered], [GROUP])
    result = run_script(registered, PASS_SOCKET, bare.socket, GROUP, receiver, RECEIVE_SOCKET)
    assert served(result["first"]), "control: the registered program is served"
    assert result["receiver"]["me"]["exe"] == str(receiver)
    assert_refused(result["receiver"]["reply"], "Forbidden", NOT_THE_CONNECTIONS, "open a connection of your own")
    assert served(result["after"]), "the sender's own calls on the same socket still work"


# argv: socket group. Signs; forks a child that signs on the inherited connection, then on one of
# its own; signs again.
FORKED_CHILD = WIRE + r'''
path, group = sys.argv[1:3]
s = connect(path)
first = sign(s, group)
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:
    _serial[0] = 100
    inherited = sign(s, group)
    own = sign(connect(path), group)
    os.write(write_end, json.dumps({"pid": os.getpid(), "inherited": inherited, "own": own}).encode())
    os._exit(0)
os.close(write_end)
report = json.loads(os.read(read_end, 1 << 20))
os.waitpid(child, 0)
_serial[0] = 200
say({"first": first, "child": report, "after": sign(s, group)})
'''


def test_a_forked_child_of_a_registered_program_is_told_to_open_its_own_connection(bare, tmp_path):
    """A registered program forks; the child (the same program, so registered too) signs on the
    connection it inherited. Expected: refused (Forbidden), naming both pids and the fix; the
    child's own connection is served, and so are the parent's calls before and after."""
    registered = python_copy(tmp_path, "registered-app")
    bare.register("registered", [registered], [GROUP])
    result = run_script(registered, FORKED_CHILD, bare.socket, GROUP)
    assert served(result["first"]) and served(result["after"])
    assert_refused(result["child"]["inherited"], "Forbidden", NOT_THE_CONNECTIONS,
                   f"the call came from pid {result['child']['pid']}", "a forked child")
    assert served(result["child"]["own"]), "the child's own connection is served"


# MARK: 3. a bind mount over a registered path, in a mount namespace of one's own

def test_a_bind_mount_over_a_registered_path_in_a_new_mount_namespace_is_refused(bare, tmp_path):
    """Attack (root, `unshare -m`): bind-mount an unregistered program over the registered path in a
    mount namespace of its own, exec it by that path and sign. Expected: NotEntitled (a path seen
    from another mount namespace means nothing). Control: the registered program, run on the host
    by the same path, is served."""
    registered = python_copy(tmp_path, "registered-app")
    impostor = python_copy(tmp_path, "impostor")
    bare.register("registered", [registered], [GROUP])
    control = run_script(registered, SIGN_ONCE, bare.socket, GROUP)
    assert served(control["reply"])
    result = run_script(["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                         'mount --bind "$0" "$1" && exec "$@"', impostor, registered], SIGN_ONCE, bare.socket, GROUP)
    assert result["me"]["exe"] == str(registered) and result["me"]["inode"] == impostor.stat().st_ino, \
        "the impostor ran under the registered path"
    assert_refused(result["reply"], "NotEntitled", "namespace of its own")


def test_an_unprivileged_bind_mount_over_a_registered_path_is_refused(user_broker, user_desktop):
    """Attack (uid 1000, `unshare -Urm`, against the user's own daemon): the same bind mount from an
    unprivileged user namespace. Expected: NotEntitled. Control: the registered program is served."""
    directory = user_bin(user_desktop)
    registered = python_copy(directory, "registered-app", uid=USER)
    impostor = python_copy(directory, "impostor", uid=USER)
    user_broker.register("registered", [registered], [GROUP])
    control = run_script(registered, SIGN_ONCE, user_broker.socket, GROUP, prefix=as_uid(USER))
    assert served(control["reply"])
    result = run_script(["unshare", "-Urm", "--", "sh", "-c", 'mount --bind "$0" "$1" && exec "$@"', impostor, registered],
                        SIGN_ONCE, user_broker.socket, GROUP, prefix=as_uid(USER))
    assert result["me"]["exe"] == str(registered) and result["me"]["inode"] == impostor.stat().st_ino
    assert_refused(result["reply"], "NotEntitled")


def test_a_host_process_running_a_file_from_another_mount_namespace_is_refused(user_broker, user_desktop):
    """Attack (uid 1000): a helper in a user+mount namespace of its own bind-mounts an unregistered
    program over the registered path; a process on the host then execs that file through
    /proc/HELPER/root/<registered path>. It stays in the daemon's mount namespace and root, and the
    kernel names its executable by the registered path, but it runs another file. Expected:
    NotEntitled (a registration by path holds only for the very file at that path). Control: the
    registered program is served."""
    directory = user_bin(user_desktop)
    registered = python_copy(directory, "registered-app", uid=USER)
    impostor = python_copy(directory, "impostor", uid=USER)
    user_broker.register("registered", [registered], [GROUP])
    control = run_script(registered, SIGN_ONCE, user_broker.socket, GROUP, prefix=as_uid(USER))
    assert served(control["reply"])
    helper = subprocess.Popen([*as_uid(USER), "unshare", "-Urm", "--", "sh", "-c",
                               'mount --bind "$0" "$1" && echo mounted && exec sleep 120', impostor, registered],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert helper.stdout.readline().strip() == "mounted"
        through = f"/proc/{helper.pid}/root{registered}"
        result = run_script(through, SIGN_ONCE, user_broker.socket, GROUP, prefix=as_uid(USER))
    finally:
        helper.kill()
        helper.wait()
    own_namespace = os.readlink(f"/proc/{user_broker.process.pid}/ns/mnt")
    assert result["me"]["exe"] == str(registered), "the kernel names it by the registered path"
    assert result["me"]["inode"] == impostor.stat().st_ino != registered.stat().st_ino, "but it runs the impostor"
    assert own_namespace == os.readlink("/proc/self/ns/mnt"), "from the daemon's own mount namespace"
    assert_refused(result["reply"], "NotEntitled", f"{registered} runs in a mount, pid or user namespace of its own, or is another file")


# MARK: 4. a Flatpak-style sandbox (bubblewrap)

def bwrap(info, broker, *, flatpak_info=True):
    """A bubblewrap sandbox as Flatpak makes one: its own mount and pid namespaces, /usr read-only,
    a read-only /.flatpak-info, the broker's socket directory bound in."""
    argv = ["bwrap", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--bind", str(broker.socket.parent), "/run/msso"]
    if flatpak_info:
        argv += ["--ro-bind", str(info), "/.flatpak-info"]
    return argv + ["--", "/usr/bin/python3"]


def flatpak_info(directory, app_id):
    info = Path(directory) / f"{app_id}.flatpak-info"
    info.write_text(f"[Application]\nname={app_id}\nruntime=runtime/org.example.Platform/x86_64/1\n\n"
                    f"[Instance]\ninstance-id=1234\n")
    return info


def test_a_flatpak_sandbox_is_known_by_its_app_id_and_only_in_a_sandbox(bare, tmp_path):
    """A real bubblewrap sandbox with a read-only /.flatpak-info naming com.example.Sandboxed.
    Expected: registered by `flatpak = "com.example.Sandboxed"` it is served; the same sandbox
    naming another id is refused; the same program run on the host (FLATPAK_ID set, no sandbox) is
    not taken as the Flatpak app; a sandbox without /.flatpak-info is refused too."""
    register_flatpak(bare, "sandboxed", "com.example.Sandboxed", [GROUP])
    sandboxed = run_script(bwrap(flatpak_info(tmp_path, "com.example.Sandboxed"), bare), SIGN_ONCE, "/run/msso/broker.sock", GROUP)
    assert sandboxed["me"]["pid"] <= 3, "it ran in a pid namespace of its own"
    assert served(sandboxed["reply"]), "the registered Flatpak id is served"

    other = run_script(bwrap(flatpak_info(tmp_path, "com.example.Other"), bare), SIGN_ONCE, "/run/msso/broker.sock", GROUP)
    assert_refused(other["reply"], "NotEntitled", "Flatpak app com.example.Other is not registered")

    no_info = run_script(bwrap(None, bare, flatpak_info=False), SIGN_ONCE, "/run/msso/broker.sock", GROUP)
    assert_refused(no_info["reply"], "NotEntitled")

    done = subprocess.run(["/usr/bin/python3", "-c", SIGN_ONCE, bare.socket, GROUP], capture_output=True, text=True,
                          timeout=60, env=dict(ENV, FLATPAK_ID="com.example.Sandboxed"))
    host = last_json(done.stdout)
    assert_refused(host["reply"], "NotEntitled", f"{INTERPRETER} is not registered")


# MARK: 4b. credentials forged from a pid namespace of one's own

# argv: socket group victim-argv... Runs the victim as a child, waits until it is alive, then
# writes a sign call whose SCM_CREDENTIALS name the victim (whose pid the kernel resolves in this
# process's pid namespace) and reports what came back. The victim reads stdin until it closes.
FORGE = WIRE + r"""
import subprocess
path, group, *victim = sys.argv[1:]
child = subprocess.Popen(victim, stdin=subprocess.PIPE)

def named():
    # The process to name: the victim itself, or (a sandbox) its descendant running the app.
    best = child.pid
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = open(f"/proc/{entry}/status").read()
            except OSError:
                continue
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            if len(fields.get("NSpid", "").split()) > 1 and fields.get("Name", "").startswith("python"):
                best = int(entry)
    return best

deadline = time.time() + 20
while time.time() < deadline:
    pid = named()
    try:
        if os.readlink(f"/proc/{pid}/exe").split("/")[-1].startswith(("python", "registered")):
            break
    except OSError:
        pass
    time.sleep(0.01)
s = connect(path)
creds = struct.pack("iII", pid, os.getuid(), os.getgid())
try:
    s.sendmsg([sign_frame(group)], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])
    forged, reply = True, receive(s)
except OSError as error:
    forged, reply = str(error), {}
child.stdin.close()
child.wait()
say({"me": me(), "named": pid, "forged": forged, "reply": reply})
"""

# As an ordinary user: a user and pid namespace of one's own, /proc of that namespace.
OWN_NAMESPACES = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]


def test_credentials_forged_in_a_pid_namespace_of_ones_own_name_nobody(user_broker, user_desktop):
    """Attack (uid 1000, `unshare -U -r -p -f`, no privilege): holding CAP_SYS_ADMIN over a pid
    namespace of its own, an unregistered program starts the registered binary (unmodified) as its
    child and stamps its own sign call with SCM_CREDENTIALS naming that child. Expected: the kernel
    takes the forgery, and the broker serves nobody: the named process did not open the
    connection (Forbidden); and the registered binary in that namespace, which the forger could
    name on a connection it opened, is served on no connection of its own (NotEntitled: it is not
    in the daemon's pid namespace). Control: the registered binary on the host is served."""
    directory = user_bin(user_desktop)
    registered = python_copy(directory, "registered-app", uid=USER)
    user_broker.register("registered", [registered], [GROUP])
    control = run_script(registered, SIGN_ONCE, user_broker.socket, GROUP, prefix=as_uid(USER))
    assert served(control["reply"])

    result = run_script(INTERPRETER, FORGE, user_broker.socket, GROUP, registered, "-c", "import sys; sys.stdin.read()",
                        prefix=[*as_uid(USER), *OWN_NAMESPACES])
    assert result["forged"] is True, f"the kernel refused the forged credentials: {result['forged']}"
    assert result["me"]["pid"] == 1, "the forger is pid 1 of a pid namespace of its own"
    assert_refused(result["reply"], "Forbidden", NOT_THE_CONNECTIONS)
    inside = run_script(registered, SIGN_ONCE, user_broker.socket, GROUP, prefix=[*as_uid(USER), *OWN_NAMESPACES])
    assert inside["me"]["pid"] == 1
    assert_refused(inside["reply"], "NotEntitled", f"{registered} runs in a mount, pid or user namespace of its own")


def test_a_sandbox_nested_in_namespaces_a_user_made_is_no_flatpak_app(user_broker, user_desktop):
    """Attack (uid 1000): inside a user and pid namespace of its own, a program starts a real
    bubblewrap sandbox showing a registered Flatpak id and names the sandboxed process in the
    credentials of its own sign call; and the sandboxed program signs on a connection of its own.
    Expected: both refused: the named process did not open the connection; the sandbox counts only
    when made from the daemon's namespaces, as Flatpak makes them. Control: the same sandbox
    started on the host is served as that Flatpak app."""
    register_flatpak(user_broker, "sandboxed", "com.example.Sandboxed", [GROUP])
    sandbox = bwrap(flatpak_info(user_bin(user_desktop), "com.example.Sandboxed"), user_broker)
    control = run_script(sandbox, SIGN_ONCE, "/run/msso/broker.sock", GROUP, prefix=as_uid(USER))
    assert served(control["reply"]), "control: a sandbox made from the host's namespaces is the Flatpak app"

    result = run_script(INTERPRETER, FORGE, user_broker.socket, GROUP, *sandbox, "-c", "import sys; sys.stdin.read()",
                        prefix=[*as_uid(USER), *OWN_NAMESPACES])
    assert result["forged"] is True, f"the kernel refused the forged credentials: {result['forged']}"
    assert result["named"] != 1
    assert_refused(result["reply"], "Forbidden", NOT_THE_CONNECTIONS)
    inside = run_script(sandbox, SIGN_ONCE, "/run/msso/broker.sock", GROUP, prefix=[*as_uid(USER), *OWN_NAMESPACES])
    assert_refused(inside["reply"], "NotEntitled")


# MARK: 5. a forged systemd scope name

SCOPE = "app-flatpak-com.example.Sandboxed-1234.scope"


def cgroup_root():
    """The cgroup v2 hierarchy, if this machine lets root make cgroups in it."""
    for candidate in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (candidate / "cgroup.procs").exists() and os.access(candidate, os.W_OK):
            return candidate
    return None


def test_a_forged_flatpak_scope_name_is_no_identity(bare):
    """Attack: a host process in a cgroup named like a Flatpak app's scope
    (app-flatpak-com.example.Sandboxed-1234.scope), with FLATPAK_ID set, while that id is
    registered. systemd-run --user needs a user manager, which this machine lacks, so the test
    makes the cgroup by hand in cgroupfs and moves the processes into it. Expected: the daemon sees
    the scope (msso apps shows it as the caller's unit) but the app is refused (NotEntitled)."""
    root = cgroup_root()
    if root is None:
        pytest.skip("no writable cgroup v2 hierarchy here, and no systemd user manager")
    register_flatpak(bare, "sandboxed", "com.example.Sandboxed", [GROUP])
    scope = root / SCOPE
    scope.mkdir(exist_ok=True)
    try:
        def inside(argv):
            return subprocess.run(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(scope), *map(str, argv)],
                                  capture_output=True, text=True, timeout=60, env=dict(bare.env, FLATPAK_ID="com.example.Sandboxed"))
        apps = inside([BIN / "msso", "apps", "--json"])
        assert apps.returncode == 0, apps.stderr
        assert json.loads(apps.stdout)["caller"]["unit"] == SCOPE, "the daemon saw the forged scope"
        done = inside(["/usr/bin/python3", "-c", SIGN_ONCE, bare.socket, GROUP])
        result = last_json(done.stdout)
        assert_refused(result["reply"], "NotEntitled", f"{INTERPRETER} is not registered")
    finally:
        wait_for(lambda: not (scope / "cgroup.procs").read_text().strip(), what="the scope to empty")
        scope.rmdir()


# MARK: 6. a pinned binary rewritten in place

def harmless_byte(binary):
    """The offset of a byte the program never reads: the file name in its .gnu_debuglink section."""
    sections = subprocess.run(["readelf", "-SW", str(binary)], capture_output=True, text=True, check=True).stdout
    for line in sections.splitlines():
        if ".gnu_debuglink" in line:
            fields = line.split("]", 1)[1].split()
            return int(fields[3], 16)  # Name Type Address Off …
    pytest.skip(f"{binary} has no .gnu_debuglink section to alter")


def test_a_pinned_binary_rewritten_in_place_with_its_old_mtime_is_refused(bare, tmp_path):
    """Attack: a pinned binary is rewritten in place (same inode, same size) and its old mtime put
    back with utime, so that a digest cached by (inode, size, mtime) would still match. Expected:
    refused (NotEntitled, the sentence shows both digests), and the audit row's detail holds the
    pinned and the running digest."""
    import hashlib
    pinned = python_copy(tmp_path, "pinned-app")
    digest = hashlib.sha256(pinned.read_bytes()).hexdigest()
    bare.register("pinned", [pinned], [GROUP], sha256=digest)
    assert served(run_script(pinned, SIGN_ONCE, bare.socket, GROUP)["reply"]), "control: the pinned binary is served"

    before = pinned.stat()
    offset = harmless_byte(pinned)
    with open(pinned, "r+b") as binary:
        binary.seek(offset)
        old = binary.read(1)
        binary.seek(offset)
        binary.write(bytes([old[0] ^ 0x20]))
    os.utime(pinned, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = pinned.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    running = hashlib.sha256(pinned.read_bytes()).hexdigest()
    assert running != digest

    result = run_script(pinned, SIGN_ONCE, bare.socket, GROUP)
    assert_refused(result["reply"], "NotEntitled", "is not the binary registered", digest, running)
    def audited():  # the audit log is written in batches every 100 ms
        rows = json.loads(bare.msso("audit", "--json").stdout)
        return next((r for r in rows if r["pid"] == result["me"]["pid"] and r["verb"] == "sign"), None)
    row = wait_for(audited, interval=0.05, what="the refused sign in the audit log")
    assert row["outcome"] == "error" and row["error"] == "NotEntitled"
    assert row["detail"] == f"pinned sha256 {digest}, running {running}", row


# MARK: 7. admin files a non-root user owns or can write

def user_config(broker, text):
    broker.user_dir.mkdir(parents=True, exist_ok=True)
    (broker.user_dir / "config.toml").write_text(text)
    broker.desktop.chown(broker.desktop.home / ".config", recursive=True)


def group_table(name, issuer, secret):
    return (f'[groups."{name}"]\nissuer = "{issuer}"\nclient_id = "msso"\nclient_secret_file = "{secret}"\n'
            f'scopes = ["openid", "app1"]\n')


@pytest.mark.parametrize("tampering", ["owned by the user", "writable by others"])
def test_admin_files_a_non_root_user_owns_or_can_write_are_ignored(user_desktop, idp, tampering):
    """Attack: the daemon's admin directory (MSSO_SYSTEM_DIR) is owned by the user, or is root's
    but world-writable (no sticky bit). Its config.toml sets [policy] user_apps = false and an
    admin-only group; its apps.d registers a program. Expected: all of it ignored: the group is
    not there, user registrations stay on, the program is refused, and mssod's log names each file
    and the fix (`chown root:root` / `chmod go-w`). Control: once the directory is root's again
    (and not writable by others), the same files are in force."""
    secret = copy_secret(idp, user_desktop)
    directory = user_bin(user_desktop)
    admins = python_copy(directory, "admins-app", uid=USER)
    mine = python_copy(directory, "my-app", uid=USER)
    broker = Broker(user_desktop, idp, groups={"com.example.admin-only": {"client_secret_file": str(secret)}},
                    register=False, start=False)
    broker.config.write_text(broker.config.read_text() + "\n[policy]\nuser_apps = false\n")
    broker.register("admins", [admins], [GROUP])
    user_config(broker, group_table(GROUP, idp.issuer, secret))
    broker.register("mine", [mine], [GROUP], admin=False)
    admin_dir = broker.admin_dir
    if tampering == "owned by the user":
        for path in [admin_dir, *admin_dir.rglob("*")]:
            os.chown(path, USER, USER)
        culprit, fix = admin_dir / "config.toml", f"chown root:root {admin_dir / 'config.toml'}"
        apps_culprit, apps_fix = admin_dir / "apps.d", f"chown root:root {admin_dir / 'apps.d'}"
    else:
        admin_dir.chmod(0o777)
        culprit, fix = admin_dir, f"chmod go-w {admin_dir}"
        apps_culprit, apps_fix = admin_dir, f"chmod go-w {admin_dir}"
    broker.start()
    try:
        assert broker.login(group=GROUP).returncode == 0
        status = json.loads(broker.msso("status", "--json").stdout)
        assert [g["group"] for g in status["groups"]] == [GROUP], "the admin-only group is not there"
        apps = json.loads(broker.msso("apps", "--json").stdout)
        assert apps["userApps"] is True, "[policy] of an untrusted file is ignored"
        assert [r["name"] for r in apps["registrations"]] == ["mine-0"]
        assert_refused(run_script(admins, SIGN_ONCE, broker.socket, GROUP, prefix=as_uid(USER))["reply"], "NotEntitled")
        assert served(run_script(mine, SIGN_ONCE, broker.socket, GROUP, prefix=as_uid(USER))["reply"])
        log = broker.log.read_text()
        config_warning = f"{admin_dir}/config.toml is not the administrator's ({culprit} "
        assert config_warning in log and fix in log, log
        assert f"{admin_dir}/apps.d is not the administrator's ({apps_culprit} " in log and apps_fix in log, log
    finally:
        broker.stop()

    # Control: root's again, only root can write: the same files count.
    for path in [admin_dir, *admin_dir.rglob("*")]:
        os.chown(path, 0, 0)
    admin_dir.chmod(0o755)
    broker.start()
    try:
        status = json.loads(broker.msso("status", "--json").stdout)
        assert sorted(g["group"] for g in status["groups"]) == sorted([GROUP, "com.example.admin-only"])
        assert json.loads(broker.msso("apps", "--json").stdout)["userApps"] is False
        assert served(run_script(admins, SIGN_ONCE, broker.socket, GROUP, prefix=as_uid(USER))["reply"])
    finally:
        broker.stop()


def test_an_admin_path_too_long_to_resolve_is_not_the_administrators(user_desktop, idp):
    """Attack: MSSO_SYSTEM_DIR names a chain of the user's own symbolic links whose resolved path is
    longer than PATH_MAX, so realpath(3) fails on it while open(2) still follows it. Expected: the
    files there are not the administrator's: their group is not there, their registration refused,
    and the log says why. (It was read as the admin's: "nothing there" stood for "cannot tell".)"""
    secret = copy_secret(idp, user_desktop)
    directory = user_bin(user_desktop)
    program = python_copy(directory, "program", uid=USER)
    deep = user_desktop.home / "deep"
    links, near = [], deep  # `near`: a short way to the deepest directory made so far
    deep.mkdir()
    for index in range(20):
        near = near / ("d" * 250)
        near.mkdir()
        if index % 10 == 9:  # a link to it, so that no path the test writes gets long
            link = user_desktop.home / f"link{index}"
            link.symlink_to(near)
            links.append(link)
            near = link
    forged = links[-1]
    assert len(os.path.realpath(forged)) > 4096, "its real path is longer than PATH_MAX"
    (forged / "apps.d").mkdir()
    (forged / "config.toml").write_text(group_table("com.example.forged", "http://127.0.0.1:9/evil", secret))
    (forged / "apps.d" / "forged.toml").write_text(f'[apps.forged]\nexecutable = "{program}"\ngroups = ["{GROUP}"]\n')
    subprocess.run(["chown", "-R", "-h", f"{USER}:{USER}", str(deep), *map(str, links)], check=True)

    broker = Broker(user_desktop, idp, groups={}, register=False, start=False)
    user_config(broker, group_table(GROUP, idp.issuer, secret))
    broker.admin_dir = forged
    broker.start()
    try:
        assert broker.login(group=GROUP).returncode == 0
        status = json.loads(broker.msso("status", "--json").stdout)
        assert [g["group"] for g in status["groups"]] == [GROUP], "the forged group is not the admin's"
        assert_refused(run_script(program, SIGN_ONCE, broker.socket, GROUP, prefix=as_uid(USER))["reply"], "NotEntitled")
        log = broker.log.read_text()
        assert f"{forged}/config.toml" in log and "not taken as the administrator's" in log, log
    finally:
        broker.stop()


def test_symbolic_links_do_not_make_the_users_files_the_administrators(user_desktop, idp):
    """Attack: the root-owned admin apps.d holds a root-owned link to a registration file the user
    owns; and, separately, MSSO_SYSTEM_DIR is a link (the user's) to a directory the user owns.
    Expected: both are judged by what they resolve to: ignored with a warning naming the file and
    the fix, and the program they register is refused. Control: the same registration in a real
    root-owned file is served."""
    secret = copy_secret(idp, user_desktop)
    directory = user_bin(user_desktop)
    program = python_copy(directory, "program", uid=USER)
    theirs = user_desktop.home / "registration.toml"
    theirs.write_text(f'[apps.linked]\nexecutable = "{program}"\ngroups = ["{GROUP}"]\n')
    user_desktop.chown(theirs)
    broker = Broker(user_desktop, idp, groups={GROUP: {"client_secret_file": str(secret)}}, register=False, start=False)
    (broker.admin_dir / "apps.d").mkdir()
    (broker.admin_dir / "apps.d" / "linked.toml").symlink_to(theirs)
    broker.start()
    try:
        assert broker.login().returncode == 0
        assert_refused(run_script(program, SIGN_ONCE, broker.socket, GROUP, prefix=as_uid(USER))["reply"], "NotEntitled")
        assert (f"{broker.admin_dir}/apps.d/linked.toml is not the administrator's ({theirs} belongs to uid {USER}, not root)"
                in broker.log.read_text())
        # Control: the same text in a file that really is root's.
        (broker.admin_dir / "apps.d" / "linked.toml").unlink()
        (broker.admin_dir / "apps.d" / "root.toml").write_text(theirs.read_text())
        assert served(run_script(program, SIGN_ONCE, broker.socket, GROUP, prefix=as_uid(USER))["reply"])
    finally:
        broker.stop()

    fake = user_desktop.home / "fake-admin"
    shutil.copytree(broker.admin_dir, fake)
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(fake)], check=True)
    link = user_desktop.home / "admin-link"
    link.symlink_to(fake)
    os.lchown(link, USER, USER)
    user_config(broker, group_table(GROUP, idp.issuer, secret))
    real_admin = broker.admin_dir
    broker.admin_dir = link
    broker.start()
    try:
        assert_refused(run_script(program, SIGN_ONCE, broker.socket, GROUP, prefix=as_uid(USER))["reply"], "NotEntitled")
        log = broker.log.read_text()
        assert f"{link}/config.toml is not the administrator's ({fake}/config.toml belongs to uid {USER}" in log, log
        assert f"chown root:root {fake}/config.toml" in log
    finally:
        broker.stop()
        broker.admin_dir = real_admin


# MARK: 8. a user's config.toml redefining an admin group

def test_a_users_config_cannot_redefine_an_admin_group(user_desktop, idp):
    """Attack: the user's config.toml redefines the admin's group with another issuer (one that would
    then receive the login password root's PAM module hands over), and adds a group of its own.
    Expected: the admin's issuer stays in force (`msso status --json` shows it), the log says the
    user's table is ignored, root's password login goes to the admin's group and IdP, and root may
    not give the password to the user's own group."""
    secret = copy_secret(idp, user_desktop)
    broker = Broker(user_desktop, idp, groups={GROUP: {"client_secret_file": str(secret)}}, register=False, start=False)
    user_config(broker, group_table(GROUP, "http://127.0.0.1:9/evil", secret)
                + "\n" + group_table("com.example.mine", idp.issuer, secret))
    broker.start()
    try:
        status = {g["group"]: g for g in json.loads(broker.msso("status", "--json").stdout)["groups"]}
        assert status[GROUP]["issuer"] == idp.issuer, status
        assert "com.example.mine" in status, "a user may add groups"
        assert (f"group \"{GROUP}\" is the administrator's; a user's file cannot redefine it, so this table is ignored"
                in broker.log.read_text())
        login = broker.msso("login", "--group", GROUP, "--username", "alice", "--password-stdin", input="alice-pass\n", prefix=[])
        assert login.returncode == 0, login.stderr
        assert json.loads(broker.msso("check", "--json", "--group", GROUP).stdout)["state"] == "valid"
        theirs = broker.msso("login", "--group", "com.example.mine", "--username", "alice", "--password-stdin",
                             input="alice-pass\n", prefix=[])
        assert theirs.returncode == 7 and "given only to groups the administrator defined" in theirs.stderr, theirs.stderr
    finally:
        broker.stop()


# MARK: Beyond the list: other routes to someone else's token

# argv: socket group other-interpreter this-script [fd first-result]. The registered program signs,
# then execs the unregistered one on the same pid, handing it the socket (and this script).
EXEC_AWAY = WIRE + r'''
path, group, other, code = sys.argv[1:5]
if len(sys.argv) > 5:  # after the exec: the unregistered program, on the same pid and socket
    s = socket.socket(fileno=int(sys.argv[5]))
    s.settimeout(30)
    _serial[0] = 100
    say({"before": json.loads(sys.argv[6]), "after": sign(s, group), "me": me()})
    sys.exit()
s = connect(path)
first = {"me": me(), "reply": sign(s, group)}
os.set_inheritable(s.fileno(), True)
os.execv(other, [other, "-c", code, path, group, other, code, str(s.fileno()), json.dumps(first)])
'''


def test_the_identity_cache_does_not_outlive_an_exec(bare, tmp_path):
    """Attack: a registered program, known to the daemon (cached by pid), execs an unregistered one
    on the same pid, which keeps the socket and signs. Expected: the registered program was served,
    the unregistered one on the same pid is refused (an exec on a connection a process has written
    on ends that process's use of it)."""
    registered = python_copy(tmp_path, "registered-app")
    other = python_copy(tmp_path, "unregistered")
    bare.register("registered", [registered], [GROUP])
    result = run_script(registered, EXEC_AWAY, bare.socket, GROUP, other, EXEC_AWAY)
    assert served(result["before"]["reply"])
    assert result["me"]["pid"] == result["before"]["me"]["pid"] and result["me"]["exe"] == str(other)
    # Refused for having exec'd on a connection it had written on (whatever the new program is).
    assert_refused(result["after"], "Forbidden", "exec'd since")


# argv: socket group registered-interpreter own-call-hex. Writes the first part of a sign frame; a registered
# program sharing the socket writes the rest, then a whole call of its own.
SPLIT_FRAME = WIRE + r'''
path, group, registered = sys.argv[1], sys.argv[2], sys.argv[3]
s = connect(path)
whole = sign_frame(group)          # serial 2
cut = len(whole) // 2
s.sendall(whole[:cut])
drained(s)                         # the daemon has read the first part
FINISH = """
import os, socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
s.sendall(bytes.fromhex(sys.argv[2]))
sys.stdin.read()  # alive until its call is answered: a sender that is gone is refused
"""
os.set_inheritable(s.fileno(), True)
finisher = __import__("subprocess").Popen([registered, "-c", FINISH, str(s.fileno()), whole[cut:].hex() + sys.argv[4]],
                                          close_fds=False, stdin=__import__("subprocess").PIPE)
replies = [receive(s), receive(s)]
finisher.stdin.close()
finisher.wait()
say({"replies": replies})
'''


def test_a_frame_written_by_two_processes_is_refused(bare, tmp_path):
    """Attack: an unregistered process writes the first half of a sign call; a registered program
    sharing the socket writes the second half (then a whole call of its own). Expected: the mixed
    frame is refused (Forbidden, "more than one process"); the registered program's own whole call
    is refused too: it did not open the connection."""
    import struct
    registered = python_copy(tmp_path, "registered-app")
    attacker = python_copy(tmp_path, "attacker")
    bare.register("registered", [registered], [GROUP])
    body = json.dumps({"type": "call", "serial": 7, "method": "sign",
                       "args": {"group": GROUP, "method": "GET", "url": URL}}).encode()
    own_call = (struct.pack(">I", len(body)) + body).hex()
    result = run_script(attacker, SPLIT_FRAME, bare.socket, GROUP, registered, own_call)
    by_serial = {reply.get("serial"): reply for reply in result["replies"]}
    assert 2 not in by_serial, "the mixed call is answered as nobody's"
    assert_refused(by_serial[0], "Forbidden", "written by more than one process")
    assert_refused(by_serial[7], "Forbidden", NOT_THE_CONNECTIONS)


# argv: socket group registered own-call-hex. A child connects, says hello, writes the first half of
# a sign call, hands the connection to the parent (over a socketpair of their own) and exits; once
# it is reaped, the parent starts the registered program as the same pid (root sets ns_last_pid)
# with the socket, and has it write the second half and a call of its own.
SPLIT_ACROSS_PID_REUSE = WIRE + r'''
import subprocess
path, group, registered, own = sys.argv[1:5]
_serial[0] = 1
whole = sign_frame(group)          # serial 2 (the child's hello: 3)
cut = len(whole) // 2
mine, theirs = socket.socketpair()
writer = os.fork()
if writer == 0:
    s = connect(path)
    s.sendall(whole[:cut])
    drained(s)                     # the daemon has read the first half
    socket.send_fds(theirs, [b"x"], [s.fileno()])
    os._exit(0)
_, fds, _, _ = socket.recv_fds(mine, 1, 1)
s = socket.socket(fileno=fds[0])
s.settimeout(30)
os.waitpid(writer, 0)
FINISH = """
import os, socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
s.sendall(bytes.fromhex(sys.argv[2]))
sys.stdin.read()  # alive until its call is answered
"""
for _ in range(50):
    with open("/proc/sys/kernel/ns_last_pid", "w") as last:
        last.write(str(writer - 1))
    child = subprocess.Popen([registered, "-c", FINISH, str(s.fileno()), whole[cut:].hex() + own], pass_fds=[s.fileno()],
                             stdin=subprocess.PIPE)
    if child.pid == writer:
        break
    child.kill()
    child.wait()
else:
    say({"error": f"pid {writer} could not be had again"})
    sys.exit()
replies = [receive(s), receive(s)]
child.stdin.close()
child.wait()
say({"writer": writer, "finisher": child.pid, "replies": replies})
'''


def test_a_frame_written_by_two_processes_that_had_the_same_pid_is_refused(bare, tmp_path):
    """Attack: an unregistered process opens a connection, writes the first half of a sign call and
    exits; its pid is handed to a registered program (root sets ns_last_pid) that is given the
    socket and writes the second half (standing in for any registered program that echoes what it
    is given), then a whole call of its own. Two processes, one pid: the connection's. Expected:
    both calls refused (Forbidden): the process that opened the connection is gone, whatever now
    holds its pid."""
    import struct
    registered = python_copy(tmp_path, "registered-app")
    attacker = python_copy(tmp_path, "attacker")
    bare.register("registered", [registered], [GROUP])
    body = json.dumps({"type": "call", "serial": 7, "method": "sign",
                       "args": {"group": GROUP, "method": "GET", "url": URL}}).encode()
    result = run_script(attacker, SPLIT_ACROSS_PID_REUSE, bare.socket, GROUP, registered, (struct.pack(">I", len(body)) + body).hex())
    assert "error" not in result, result
    assert result["writer"] == result["finisher"], "one pid, two processes"
    by_serial = {reply.get("serial"): reply for reply in result["replies"]}
    assert_refused(by_serial[2], "Forbidden", "is gone")
    assert_refused(by_serial[7], "Forbidden", "is gone")


def test_a_call_before_hello_is_refused(bare, tmp_path):
    """Attack: a registered program sends sign before hello. Expected: BadRequest, no token."""
    registered = python_copy(tmp_path, "registered-app")
    bare.register("registered", [registered], [GROUP])
    script = WIRE + 's = connect(sys.argv[1], hello=False)\nsay({"reply": sign(s, sys.argv[2])})\n'
    assert_refused(run_script(registered, script, bare.socket, GROUP)["reply"], "BadRequest", "the first call must be hello")


def test_a_running_registered_binary_replaced_on_disk_is_refused(bare, tmp_path):
    """A registered program's file is replaced (deleted, a new one put at its path, as an upgrade
    does) while it runs. Expected: the old process, whose executable the kernel now names
    "PATH (deleted)", is refused; a process of the new file at the path is served."""
    registered = python_copy(tmp_path, "registered-app")
    bare.register("registered", [registered], [GROUP])
    script = WIRE + r'''
s = connect(sys.argv[1])
say({"me": me(), "reply": sign(s, sys.argv[2])})
sys.stdin.readline()
say({"me": me(), "reply": sign(s, sys.argv[2])})
'''
    old = Attacker([registered, "-c", script, bare.socket, GROUP])
    try:
        assert served(old.line()["reply"])
        registered.unlink()
        shutil.copy2(INTERPRETER, registered)
        old.tell("again")
        result = old.line()
    finally:
        old.end()
    assert result["me"]["exe"] == f"{registered} (deleted)"
    assert_refused(result["reply"], "NotEntitled")
    assert served(run_script(registered, SIGN_ONCE, bare.socket, GROUP)["reply"])


# argv: socket group. A child connects, says hello, hands the connection to the parent (over a
# socketpair of their own) and waits for "go"; then it writes a sign call with 22 descriptors
# attached (enough to crowd a pidfd out of a control buffer of the daemon's size) and exits. The
# parent reaps it, then reads the answer on "read".
SEND_AND_EXIT = WIRE + r'''
path, group = sys.argv[1], sys.argv[2]
mine, theirs = socket.socketpair()
cue_r, cue_w = os.pipe()
sender = os.fork()
if sender == 0:
    s = connect(path)
    socket.send_fds(theirs, [b"x"], [s.fileno()])
    os.read(cue_r, 1)
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(22)]
    try:
        s.sendmsg([sign_frame(group)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        passed = "sent"
    except OSError as error:
        passed = error.strerror
        s.sendall(sign_frame(group))
    os.write(1, (json.dumps({"descriptors": passed}) + "\n").encode())
    os._exit(0)
_, fds, _, _ = socket.recv_fds(mine, 1, 1)
s = socket.socket(fileno=fds[0])
s.settimeout(30)
say({"sender": sender})
sys.stdin.readline()
os.write(cue_w, b"x")
os.waitpid(sender, 0)  # reaped: its pid is free for the next process
say({"sender_reaped": True})
sys.stdin.readline()
say({"reply": receive(s)})
'''


def take_pid(pid, argv, attempts=50):
    """Starts argv as process `pid` (root writes ns_last_pid, as CRIU does), or returns None."""
    for _ in range(attempts):
        with open("/proc/sys/kernel/ns_last_pid", "w") as last:
            last.write(str(pid - 1))
        process = subprocess.Popen(argv, env=ENV)
        if process.pid == pid:
            return process
        process.kill()
        process.wait()
    return None


def test_a_sender_gone_before_its_call_is_read_is_refused_even_when_its_pid_is_reused(bare, tmp_path):
    """Attack: with the daemon stopped, an unregistered process writes a sign call on the connection
    it opened (trying to attach 22 descriptors) and exits, another process keeping the socket; its pid is handed to a registered program (root sets ns_last_pid); the daemon then
    resumes and reads the call. Expected: the kernel refuses descriptors sent to the broker
    (EPERM), and the call is refused as coming from a process that is gone, never served as the
    registered program now holding the pid."""
    registered = python_copy(tmp_path, "registered-app")
    attacker = python_copy(tmp_path, "attacker")
    bare.register("registered", [registered], [GROUP])
    assert served(run_script(registered, SIGN_ONCE, bare.socket, GROUP)["reply"])
    mssod = bare.process.pid
    script = Attacker([attacker, "-c", SEND_AND_EXIT, bare.socket, GROUP])
    holder = None
    try:
        sender = script.line()["sender"]
        os.kill(mssod, signal.SIGSTOP)
        try:
            script.tell("go")
            descriptors = script.line()["descriptors"]
            assert script.line()["sender_reaped"]
            holder = take_pid(sender, [registered, "-c", "import time; time.sleep(120)"])
            assert holder is not None, f"could not start the registered program as pid {sender}"
            wait_for(lambda: os.readlink(f"/proc/{sender}/exe") == str(registered), what="the registered program")
        finally:
            os.kill(mssod, signal.SIGCONT)
        script.tell("read")
        reply = script.line()["reply"]
    finally:
        script.end()
        if holder:
            holder.kill()
            holder.wait()
    # Refused as gone; or, when the stop landed late on a loaded machine and the call was read
    # while its sender still ran, refused as the attacker it came from. Never as the registered
    # program that holds the pid now.
    assert not is_token(reply), "served as the registered program holding the reused pid"
    if reply.get("error") != "Forbidden":
        assert_refused(reply, "NotEntitled", f"{attacker} is not registered")
    else:
        assert_refused(reply, "Forbidden", "is gone")
    assert descriptors == "Operation not permitted", "descriptors are not accepted by the broker's socket"


# argv: socket group registered. Says hello; on "go" (the daemon is stopped), forks a reader that
# keeps the socket, writes a sign call, and execs the registered program at once. The reader reads
# the answer on "read".
SEND_THEN_EXEC = WIRE + r'''
path, group, registered = sys.argv[1], sys.argv[2], sys.argv[3]
s = connect(path)
os.set_inheritable(s.fileno(), True)
say({"pid": os.getpid()})
sys.stdin.readline()
cue_r, cue_w = os.pipe()  # cue_w closes at the exec
if os.fork() == 0:
    os.close(cue_w)
    os.read(cue_r, 1)
    sys.stdin.readline()
    say({"reply": receive(s)})
    os._exit(0)
s.sendall(sign_frame(group))
os.execv(registered, [registered, "-c", "import time; time.sleep(120)"])
'''


def write_then_exec(bare, tmp_path, script_text, *more, whole=False):
    """Runs an exec-race script (argv: socket group registered MORE...) as an unregistered program,
    with the daemon stopped from "go" until the exec is done; returns the reply its accomplice read.
    With MORE "accepted", the daemon is stopped only once it holds the script's connection."""
    registered = python_copy(tmp_path, "registered-app")
    attacker = python_copy(tmp_path, "attacker")
    bare.register("registered", [registered], [GROUP])
    mssod = bare.process.pid
    script = Attacker([attacker, "-c", script_text, bare.socket, GROUP, registered, *more])
    try:
        pid = script.line()["pid"]
        if "accepted" in more:  # mssod holds the /proc directory of each connection's process
            def holds_it():
                for fd in os.listdir(f"/proc/{mssod}/fd"):
                    try:
                        if os.readlink(f"/proc/{mssod}/fd/{fd}") == f"/proc/{pid}":
                            return True
                    except OSError:
                        pass
                return False
            wait_for(holds_it, what="mssod accepting the connection")
        with frozen(mssod):
            script.tell("go")
            wait_for(lambda: os.readlink(f"/proc/{pid}/exe") == str(registered), what="the exec")
        script.tell("read")
        answers = script.line()
        return answers if whole else answers["reply"]
    finally:
        script.end()


def test_a_call_written_just_before_an_exec_is_not_served_as_the_program_execd(bare, tmp_path):
    """Attack: an unregistered process writes a sign call and at once execs a registered program
    (the accomplice it forked reads the answer); the daemon reads the call only after the exec
    (here it is stopped meanwhile; a busy daemon, or one whose reading of the connection is paused
    by unread replies, gives the same order). Expected: no token: the process wrote `hello` on the
    connection as the attacker, so a call from it as another program is refused."""
    reply = write_then_exec(bare, tmp_path, SEND_THEN_EXEC)
    assert not is_token(reply), "the attacker's call was served as the registered program"


# argv: socket group registered. Says hello; pipelines pings without reading the replies until the
# daemon stops reading the connection (what it wrote stays unread: SIOCOUTQ); writes a sign call;
# execs the registered program. Its forked accomplice then reads every reply.
SEND_THEN_EXEC_UNDER_BACKPRESSURE = WIRE + r'''
import fcntl, termios
path, group, registered = sys.argv[1:4]
s = connect(path)
def unread():
    count = array.array("i", [0])
    fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, count)
    return count[0]
pings = 0
while unread() == 0:
    s.sendall(frame("ping", {"data": "x" * 8000}))
    pings += 1
    time.sleep(0.02)
os.set_inheritable(s.fileno(), True)
cue_r, cue_w = os.pipe()  # cue_w closes at the exec
if os.fork() == 0:
    os.close(cue_w)
    os.read(cue_r, 1)
    while os.readlink(f"/proc/{os.getppid()}/exe") != registered:
        time.sleep(0.01)
    replies = [receive(s) for _ in range(pings + 1)]
    say({"pings": pings, "reply": next(r for r in replies if r.get("serial") == pings + 2)})
    os._exit(0)
s.sendall(sign_frame(group))
os.execv(registered, [registered, "-c", "import time; time.sleep(120)"])
'''


def test_a_call_written_just_before_an_exec_is_not_served_even_under_backpressure(bare, tmp_path):
    """Attack: the same, without stopping the daemon: the attacker leaves its replies unread until
    the daemon stops reading the connection (past its high-water mark), writes a sign call, and
    execs the registered program; its accomplice then reads, the daemon reads on and judges the
    call. Expected: no token."""
    registered = python_copy(tmp_path, "registered-app")
    attacker = python_copy(tmp_path, "attacker")
    bare.register("registered", [registered], [GROUP])
    process = subprocess.Popen([attacker, "-c", SEND_THEN_EXEC_UNDER_BACKPRESSURE, bare.socket, GROUP, registered],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 60)
        assert ready, "the accomplice reported nothing"
        result = last_json(process.stdout.readline())
    finally:
        process.kill()
        process.wait()
    assert result["pings"] > 1
    assert not is_token(result["reply"]), "the attacker's call was served as the registered program"


# argv: socket group registered when. The parent connects without a word (at once when `when` is
# "accepted", else on "go"), forks a reader that keeps the socket, writes hello and a sign call at
# once on "go" and execs the registered program: the daemon has never read anything from it before.
SEND_THEN_EXEC_UNSEEN = WIRE + r'''
path, group, registered, when = sys.argv[1:5]
s = connect(path, hello=False) if when == "accepted" else None
say({"pid": os.getpid()})
sys.stdin.readline()
if s is None:
    s = connect(path, hello=False)
os.set_inheritable(s.fileno(), True)
cue_r, cue_w = os.pipe()
if os.fork() == 0:
    os.close(cue_w)
    os.read(cue_r, 1)  # the parent exec'd
    sys.stdin.readline()
    hello = receive(s)
    say({"hello": hello, "reply": receive(s)})
    os._exit(0)
s.sendall(frame("hello", {"version": 1}) + sign_frame(group))
os.execv(registered, [registered, "-c", "import time; time.sleep(120)"])
'''


def test_a_call_written_just_before_an_exec_on_a_connection_never_written_on_is_refused(bare, tmp_path):
    """Attack: an unregistered process connects and says nothing; once mssod has accepted the
    connection (and with it is stopped), it writes hello and a sign call at once and execs the
    registered program (the reader it forked reads the answer). Expected: refused (Forbidden,
    exec'd since): mssod took the program it ran when it accepted. Served on the code before."""
    answers = write_then_exec(bare, tmp_path, SEND_THEN_EXEC_UNSEEN, "accepted", whole=True)
    assert_refused(answers["hello"], "Forbidden", "exec'd since")
    assert_refused(answers["reply"], "Forbidden", "exec'd since")


def test_a_call_written_with_hello_before_an_exec_by_a_process_never_seen_before_is_refused(bare, tmp_path):
    """Attack: as above, but the process connects, writes hello and a sign call and execs while
    mssod is stopped, so that mssod accepts the connection only after the exec and has never seen
    the process run anything but the registered program. Expected: no token: hello must come
    alone (a call could be written only after hello's answer, so by the program mssod judged), so
    hello is refused (BadRequest, saying to wait for its answer) and the connection closed, the
    sign unanswered. Served on the code before (an xfail test until then)."""
    answers = write_then_exec(bare, tmp_path, SEND_THEN_EXEC_UNSEEN, "stopped", whole=True)
    assert_refused(answers["hello"], "BadRequest", "before its answer came")
    assert answers["reply"] == {"type": "closed"}, answers["reply"]


# A file; argv: socket group registered attacker cue [stage fd]. On "go" (mssod stopped), connects,
# writes hello alone, forks a reader that keeps the socket (on "hello" it reads hello's answer, on
# "read" the next one), and execs the registered program as a launcher: once the file `cue` exists,
# it execs what it was given, this script's "again" stage, which writes a sign call on the
# inherited socket and execs the registered program for good.
BOUNCE = WIRE + r'''
path, group, registered, attacker, cue = sys.argv[1:6]
stage = sys.argv[6] if len(sys.argv) > 6 else "start"
LAUNCHER = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.005)\nos.execv(sys.argv[2], sys.argv[2:])"
if stage == "again":
    s = socket.socket(fileno=int(sys.argv[7]))
    s.sendall(sign_frame(group))
    os.execv(registered, [registered, "-c", "import time; time.sleep(120)"])
say({"pid": os.getpid()})
sys.stdin.readline()
s = connect(path, hello=False)
s.sendall(frame("hello", {"version": 1}))
os.set_inheritable(s.fileno(), True)
if os.fork() == 0:
    for word in ("hello", "read"):
        sys.stdin.readline()
        say({word: receive(s)})
    os._exit(0)
os.execv(registered, [registered, "-c", LAUNCHER, cue, attacker, sys.argv[0], path, group, registered, attacker, cue,
                      "again", str(s.fileno())])
'''


def test_a_registered_launcher_that_execs_an_unregistered_program_and_back_lends_it_nothing(bare, tmp_path):
    """Attack (a blind attacker's): an unregistered process writes hello alone and execs a
    registered program that launches, in its own process, what it is given (as wrappers do), all
    before mssod accepts the connection (mssod stopped); mssod accepts it as the registered
    program. Then, while mssod is stopped again, the launcher execs the unregistered program,
    which writes a sign call and execs the registered program again: at its next look mssod sees
    the file it took at accept. Expected: no token: mssod holds the address space the process had
    when accepted, which an exec ends (Forbidden, exec'd since). Served on the code before (the
    executable alone could not show an exec away and back)."""
    registered = python_copy(tmp_path, "registered-app")
    attacker = python_copy(tmp_path, "attacker")
    cue, bounce = tmp_path / "cue", tmp_path / "bounce.py"
    bounce.write_text(BOUNCE)
    bare.register("registered", [registered], [GROUP])
    mssod = bare.process.pid
    script = Attacker([attacker, bounce, bare.socket, GROUP, registered, attacker, cue])
    try:
        pid = script.line()["pid"]
        with frozen(mssod):
            script.tell("go")
            wait_for(lambda: os.readlink(f"/proc/{pid}/exe") == str(registered), what="the launcher")
        script.tell("hello")
        hello = script.line()["hello"]
        assert hello["type"] == "reply" and hello["result"]["peer"]["executable"] == str(registered), hello
        with frozen(mssod):
            cue.touch()
            wait_for(lambda: b"time.sleep(120)" in Path(f"/proc/{pid}/cmdline").read_bytes(), what="the way back")
        script.tell("read")
        reply = script.line()["read"]
    finally:
        script.end()
    assert_refused(reply, "Forbidden", "exec'd since")


# The wire protocol in C, prepended to the attackers that must be C programs: `call` writes a
# frame on the connection `s` and prints the answer's payload (or {"type": "closed"}) as a line.
C_WIRE = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
static int s;
static void call(const char *json) {
    unsigned int n = strlen(json); unsigned char head[4] = { n >> 24, n >> 16, n >> 8, n };
    write(s, head, 4); write(s, json, n);
    if (read(s, head, 4) != 4) { puts("{\"type\": \"closed\"}"); fflush(stdout); return; }
    n = (unsigned)head[0] << 24 | head[1] << 16 | head[2] << 8 | head[3];
    static char answer[65536];
    memset(answer, 0, sizeof answer);
    for (unsigned got = 0; got < n && got < sizeof answer - 1;) { ssize_t k = read(s, answer + got, n - got); if (k <= 0) break; got += k; }
    puts(answer);
    fflush(stdout);
}
"""


# argv: socket. Says hello, then its main thread ends (pthread_exit) and another thread, once the
# process's executable can no longer be read, asks for status and prints the answer.
LEADER_EXITS = C_WIRE + r"""
#include <pthread.h>
static void *later(void *unused) {
    char link[4096];
    while (readlink("/proc/self/exe", link, sizeof link) > 0) usleep(1000);
    call("{\"type\": \"call\", \"serial\": 2, \"method\": \"status\", \"args\": {}}");
    _exit(0);
}
int main(int argc, char **argv) {
    (void)argc;
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) return 1;
    call("{\"type\": \"call\", \"serial\": 1, \"method\": \"hello\", \"args\": {\"version\": 1}}");
    pthread_t thread;
    pthread_create(&thread, NULL, later, NULL);
    pthread_exit(NULL);
}
"""


def test_a_process_whose_main_thread_ended_is_told_so_not_that_it_execd(bare, tmp_path):
    """A process calls from a thread after its main thread ended: its executable can no longer be
    read, which is not an exec. Expected: Forbidden naming that cause and the fix (an outside
    attack was told "exec'd since")."""
    source, program = tmp_path / "leader.c", tmp_path / "leader"
    source.write_text(LEADER_EXITS)
    subprocess.run(["cc", "-O2", "-pthread", "-o", program, source], check=True)
    hello, status = [json.loads(line) for line in
                     subprocess.run([program, bare.socket], capture_output=True, text=True, timeout=30).stdout.splitlines()]
    assert hello["type"] == "reply", hello
    assert_refused(status, "Forbidden", "can no longer be read", "main thread")
    assert "exec'd" not in status["message"]


# argv: registered socket group. Without an exec, renames its own executable to `registered`: its
# code in a library (so that its executable's mappings can go), a sibling sharing its memory in a
# user namespace of its own sets the executable with prctl(PR_SET_MM_MAP, exe_fd), which the
# kernel allows that namespace's root. Then it says hello and signs, printing both answers.
RENAMER = C_WIRE + r"""
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <linux/prctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
static struct prctl_mm_map map;
static int set_executable(void *unused) { (void)unused; _exit(prctl(PR_SET_MM, PR_SET_MM_MAP, &map, sizeof map, 0) ? 1 : 0); }
int renamer(char **argv) {
    char own[4096] = { 0 }, line[8192], path[4096];
    readlink("/proc/self/exe", own, sizeof own - 1);
    FILE *maps = fopen("/proc/self/maps", "r");
    unsigned long ranges[32][2]; int count = 0;
    while (fgets(line, sizeof line, maps) && count < 32) {
        unsigned long from, to;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095[^\n]", &from, &to, path) == 3 && strcmp(path, own) == 0) {
            ranges[count][0] = from; ranges[count][1] = to; count++;
        }
    }
    fclose(maps);
    for (int i = 0; i < count; i++) munmap((void *)ranges[i][0], ranges[i][1] - ranges[i][0]);
    char stat[4096] = { 0 };
    int fd = open("/proc/self/stat", O_RDONLY);
    read(fd, stat, sizeof stat - 1);
    close(fd);
    unsigned long long field[53] = { 0 };
    int n = 3;
    for (char *word = strtok(strrchr(stat, ')') + 2, " "); word && n < 53; word = strtok(NULL, " ")) field[n++] = strtoull(word, NULL, 10);
    map.start_code = field[26]; map.end_code = field[27]; map.start_stack = field[28];
    map.start_data = field[45]; map.end_data = field[46]; map.start_brk = field[47];
    map.arg_start = field[48]; map.arg_end = field[49]; map.env_start = field[50]; map.env_end = field[51];
    map.brk = (unsigned long)sbrk(0);
    map.exe_fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    char *stack = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int status = 1;
    pid_t sibling = clone(set_executable, stack + (1 << 16), CLONE_VM | CLONE_NEWUSER | SIGCHLD, NULL);
    if (sibling > 0) waitpid(sibling, &status, 0);
    readlink("/proc/self/exe", path, sizeof path);
    printf("{\"renamed\": %s}\n", status == 0 ? "true" : "false");
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    strncpy(address.sun_path, argv[2], sizeof address.sun_path - 1);
    if (connect(s, (struct sockaddr *)&address, sizeof address) != 0) _exit(1);
    call("{\"type\": \"call\", \"serial\": 1, \"method\": \"hello\", \"args\": {\"version\": 1}}");
    char sign[512];
    snprintf(sign, sizeof sign, "{\"type\": \"call\", \"serial\": 2, \"method\": \"sign\", \"args\": "
             "{\"group\": \"%s\", \"method\": \"GET\", \"url\": \"https://api.example.com/items\"}}", argv[3]);
    call(sign);
    _exit(0);
}
"""


@pytest.mark.xfail(strict=True, reason="documented limit (docs/SECURITY.md): with unprivileged user namespaces, a "
                                       "process may rename its own executable (prctl PR_SET_MM_MAP), pins included")
def test_a_program_that_renames_its_executable_without_exec_is_not_served(user_broker, user_desktop):
    """Attack (a blind attacker's; uid 1000, no privilege): an unregistered program, in the host's
    namespaces throughout, makes the kernel name a registered, sha256-pinned file as its executable
    (/proc/PID/exe) without exec'ing it: a sibling sharing its memory in a user namespace of its
    own calls prctl(PR_SET_MM_MAP) with that file. Expected, were it closed: no token. The kernel
    gives this to the root of any user namespace ("a user with access to ptrace can masquerade an
    arbitrary program as any executable", says its source); only a system without unprivileged
    user namespaces closes it."""
    directory = user_bin(user_desktop)
    registered = python_copy(directory, "registered-app", uid=USER)
    pin = hashlib.sha256(registered.read_bytes()).hexdigest()
    user_broker.register("registered", [registered], [GROUP], admin=True, sha256=pin)
    source = directory / "renamer.c"
    source.write_text(RENAMER)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-Wl,-z,now", "-o", directory / "librenamer.so", source], check=True)
    stub = directory / "stub.c"
    stub.write_text("int renamer(char **); int main(int c, char **v) { (void)c; return renamer(v); }\n")
    subprocess.run(["cc", "-O2", "-o", directory / "renamer", stub, "-L", directory, "-lrenamer", "-Wl,-z,now",
                    f"-Wl,-rpath,{directory}"], check=True)
    for built in ("renamer", "librenamer.so"):
        user_desktop.chown(directory / built)
    done = subprocess.run([*as_uid(USER), directory / "renamer", registered, user_broker.socket, GROUP],
                          capture_output=True, text=True, timeout=30)
    renamed, hello, reply = [json.loads(line) for line in done.stdout.splitlines()]
    remember_tokens(reply)
    assert renamed["renamed"], done.stderr
    assert hello["result"]["peer"]["executable"] == str(registered), hello
    assert not is_token(reply), "an unregistered program was served as the registered one"


PYTHON_LOGIN = """
import asyncio, sys
sys.path.insert(0, sys.argv[2])
import msso, msso.aio
async def log_in():
    async with msso.aio.Client(sys.argv[1]) as client:
        await client.login(username="alice", password="alice-pass")
try:
    if sys.argv[3] == "asyncio":
        asyncio.run(log_in())
    else:
        msso.Client(sys.argv[1]).login(username="alice", password="alice-pass")
except msso.MSSOError as error:
    print(f"{type(error).__name__}: {error}", file=sys.stderr)
    sys.exit(error.exit_status)
"""


@pytest.mark.parametrize("client", ["msso", "python", "python-asyncio", "msso as root of a user namespace",
                                    "python as root of a user namespace"])
def test_a_socket_another_user_planted_gets_no_password(client):
    """Attack: eve listens on a socket where the user's MSSO_SOCKET points (a directory anyone may
    write, a shared XDG_RUNTIME_DIR). The user's password login would hand eve the password
    (an outside attack did it with `msso login` and `msso lock`'s passphrase). Expected: the
    client asks the kernel who listens (SO_PEERCRED) before it sends a byte, and refuses a
    broker of another uid, naming it; eve receives nothing. (libmsso: test_c_library.py; the Go
    library: test_go_library.py.) Root may address any user's broker, but only the machine's root:
    tester as root of a user namespace of its own (`unshare -r`, where eve is 65534) is refused
    too (an outside attack took the password that way when any euid 0 was exempt)."""
    planted = PlantedSocket()
    try:
        namespace = ["unshare", "-r"] if "user namespace" in client else []
        if client.startswith("msso"):
            argv = [*namespace, BIN / "msso", "login", "--username", "alice", "--password-stdin"]
        else:
            argv = [*namespace, "/usr/bin/python3", "-c", PYTHON_LOGIN, planted.path, ROOT / "clients" / "python" / "src",
                    "asyncio" if client.endswith("asyncio") else "blocking"]
        done = subprocess.run([*as_uid(1001), *map(str, argv)], input="alice-pass\n", capture_output=True, text=True,
                              timeout=30, env={"PATH": "/usr/bin:/bin", "MSSO_SOCKET": str(planted.path), "HOME": "/tmp"})
        print(done.stderr)
        assert done.returncode == 3, (done.returncode, done.stderr)
        seen = 65534 if namespace else 1002  # (eve is not mapped into tester's namespace)
        assert f"runs as another user (uid {seen})" in done.stderr and "not talking to it" in done.stderr, done.stderr
        assert planted.received() == b"", "eve received nothing"
    finally:
        planted.close()
