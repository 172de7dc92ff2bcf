"""SSH forwarding with per-host limits: `msso ssh HOST` makes the broker reachable on the remote
host for that session only, through a socket the broker makes for that host; every call through it
is judged as "host H", within its `[forward."H"]` table.

Against a real OpenSSH server (a private sshd on 127.0.0.1, its own host key, public-key login)
whose remote account is a user made for these tests: real git over HTTP through the forwarded
git-credential-msso, refusals of hosts, verbs and groups outside the table, Allow and Deny through a
real notification server, the audit naming the host, and the forward gone when the session ends."""
import json
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness import BIN, GROUP, SECRETS, Broker, RawClient, answers, free_port, wait_for
from test_tools import repos, server  # noqa: F401 (fixtures: a bare repository, served by the token server)

SSHD = Path("/usr/sbin/sshd")
REMOTE_USER = "msso-ssh-e2e"
HOST = "127.0.0.1"  # the host as `msso ssh` names it, and its [forward."127.0.0.1"] table
OTHER = "com.example.other"

pytestmark = pytest.mark.skipif(not SSHD.exists() or os.geteuid() != 0,
                                reason="needs openssh-server (scripts/setup installs it) and root, to run sshd and add its user")

SSHD_CONFIG = """ListenAddress 127.0.0.1
Port {port}
HostKey {dir}/host_ed25519
PidFile none
AuthorizedKeysFile {dir}/authorized_keys
AllowUsers {user}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
AcceptEnv MSSO_SOCKET
AllowStreamLocalForwarding yes
StreamLocalBindUnlink yes
LogLevel VERBOSE
"""


class SSHServer:
    """A private sshd on 127.0.0.1 (as root, its own host key and config) whose only account is a
    user made for the tests, with a home of its own; a key pair the tests log in with."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="msso-sshd-"))
        self.dir.chmod(0o755)  # the remote user reads authorized_keys here
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="msso-remote-"))
        subprocess.run(["userdel", REMOTE_USER], capture_output=True)  # a run that crashed left it
        # "*": no password, and not locked ("!"), which sshd without PAM would refuse.
        subprocess.run(["useradd", "-M", "-d", str(self.home), "-s", "/bin/bash", "-p", "*", REMOTE_USER],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(REMOTE_USER)
        self.uid = entry.pw_uid
        os.chown(self.home, entry.pw_uid, entry.pw_gid)
        self.home.chmod(0o700)
        for name in ("host_ed25519", "client_ed25519"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(self.dir / name)],
                           check=True, capture_output=True)
        self.key = self.dir / "client_ed25519"
        shutil.copy(self.dir / "client_ed25519.pub", self.dir / "authorized_keys")
        (self.dir / "authorized_keys").chmod(0o644)
        config = self.dir / "sshd_config"
        config.write_text(SSHD_CONFIG.format(port=self.port, dir=self.dir, user=REMOTE_USER))
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory
        self.log = self.dir / "sshd.log"
        self.process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=open(self.log, "w"),
                                        stderr=subprocess.STDOUT)
        wait_for(lambda: self.listening() or self.process.poll() is not None, what="sshd")
        assert self.process.poll() is None, self.log.read_text()

    def listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def arguments(self, command):
        """What follows the destination on `msso ssh`'s command line: ssh's options, then the
        remote command (ssh reads options after the destination too)."""
        return ["-F", "/dev/null", "-i", str(self.key), "-p", str(self.port), "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", command]

    def files_holding(self, secrets):
        """Files of the remote user (its home, and its sockets' directory, /tmp) that hold any of `secrets`."""
        found = []
        for path in [*self.home.rglob("*"), *Path("/tmp").glob("msso-ssh-*")]:
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found += [str(path) for secret in secrets if secret.encode() in data]
        return found

    def cleanup(self):
        self.process.terminate()
        self.process.wait(timeout=10)
        for leftover in Path("/tmp").glob("msso-ssh-*.sock"):
            if leftover.lstat().st_uid == self.uid:
                leftover.unlink()
        subprocess.run(["pkill", "-KILL", "-u", REMOTE_USER], capture_output=True)  # the test user's own processes only
        subprocess.run(["userdel", REMOTE_USER], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="module")
def sshd():
    served = SSHServer()
    yield served
    served.cleanup()


def forward_table(host=HOST, groups=(GROUP,), verbs=None, confirm=False):
    lines = [f'[forward."{host}"]', f"groups = {json.dumps(list(groups))}"]
    if verbs is not None:
        lines.append(f"verbs = {json.dumps(list(verbs))}")
    if confirm is not None:
        lines.append(f"confirm = {'true' if confirm else 'false'}")
    return "\n".join(lines) + "\n"


def forwarding_broker(desktop, idp, tables="", groups=None, policy=""):
    """mssod with `tables` added to its configuration (and `policy`, the administrator's
    [policy] lines), logged in to every group."""
    broker = Broker(desktop, idp, groups=groups, start=False)
    with open(broker.config, "a") as config:
        config.write(("[policy]\n" + policy + "\n" if policy else "") + tables)
    broker.start()
    for group in groups or {GROUP: {}}:
        assert broker.login(group=group).returncode == 0
    return broker


def msso_ssh(broker, sshd, command, host=HOST, options=(), **kwargs):
    """`msso ssh [options] USER@HOST [ssh's options] COMMAND` run on this machine, as the broker's user."""
    return broker.msso("ssh", *options, f"{REMOTE_USER}@{host}", *sshd.arguments(command), **kwargs)


def remote(command):
    """A remote command that runs the build's msso tools (they find the broker through MSSO_SOCKET)."""
    return f"export PATH={BIN}:$PATH; {command}"


# Run on the remote host: says hello on $MSSO_SOCKET and prints the reply.
HELLO = """
import json, os, socket, struct
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["MSSO_SOCKET"])
body = json.dumps({"type": "call", "serial": 1, "method": "hello", "args": {"version": 1}}).encode()
s.sendall(struct.pack(">I", len(body)) + body)
length = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
print(s.recv(length, socket.MSG_WAITALL).decode(), flush=True)
"""


def marker_ssh(tmp_path):
    """A stand-in for ssh that leaves a mark when run: to show a refusal came before ssh."""
    marker = tmp_path / "ssh-ran"
    program = tmp_path / "fake-ssh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\n")
    program.chmod(0o755)
    return program, marker


def test_git_over_http_on_the_remote_host_through_the_forwarded_helper(desktop, idp, sshd, server):  # noqa: F811
    broker = forwarding_broker(desktop, idp, forward_table())
    try:
        (sshd.home / ".gitconfig").write_text(
            f'[credential]\n\thelper = "{BIN / "git-credential-msso"} --group {GROUP}"\n'
            "[user]\n\tname = Remote\n\temail = remote@example.com\n[init]\n\tdefaultBranch = main\n")
        os.chown(sshd.home / ".gitconfig", sshd.uid, sshd.uid)
        work = sshd.home / "work"
        command = (f"echo \"socket=$MSSO_SOCKET\"; export GIT_TERMINAL_PROMPT=0; git clone -q {server.url}/git/suite.git {work}"
                   f" && cd {work} && cat README && echo remote > FROM-REMOTE && git add FROM-REMOTE && git commit -qm 'from the remote'"
                   " && git push -q origin main")
        done = msso_ssh(broker, sshd, command)
        SECRETS.update(server.seen)
        assert done.returncode == 0, done.stderr
        assert "suite" in done.stdout, "cloned over HTTP with the broker's token"
        assert done.stdout.startswith("socket=/tmp/msso-ssh-"), "sshd accepted MSSO_SOCKET (AcceptEnv): the helper found the broker"
        log = subprocess.run(["git", "--git-dir", str(server.git_root / "suite.git"), "log", "-1", "--format=%s"],
                             capture_output=True, text=True).stdout.strip()
        assert log == "from the remote", "and pushed"
        assert server.seen, "the server saw the broker's token (git first asks without one, as always)"
        assert sshd.files_holding(server.seen) == [], "no token was written on the remote host"

        # The audit names the host: every forwarded call, and the forward itself.
        rows = json.loads(broker.msso("audit", "--json").stdout)
        forwarded = [row for row in rows if row.get("host") == HOST]
        assert {(row["verb"], row["outcome"]) for row in forwarded} >= {("forward", "ok"), ("token", "ok")}
        assert all(row.get("executable") is None for row in forwarded if row["verb"] == "token"), "judged as the host, not a program"
        assert f"ssh:{HOST} (through ssh pid" in broker.msso("audit").stdout
    finally:
        broker.stop()


def test_a_host_without_a_forward_table_is_refused_before_ssh_runs(desktop, idp, tmp_path):
    broker = forwarding_broker(desktop, idp, forward_table(host="build01"))
    try:
        program, marker = marker_ssh(tmp_path)
        done = broker.msso("ssh", "--ssh", program, "alice@Elsewhere.example.com", "true")
        assert done.returncode == 7, done.stderr
        assert 'no [forward."elsewhere.example.com"] table names host elsewhere.example.com' in done.stderr
        assert f"add one to {broker.user_dir}/config.toml" in done.stderr and "systemctl --user reload msso" in done.stderr
        assert not marker.exists(), "ssh never ran"
        assert not list((desktop.runtime / "msso").glob("forwards/*")), "no socket was made"
    finally:
        broker.stop()


def test_a_hosts_table_that_gives_no_group_opens_no_forward(desktop, idp, tmp_path):
    """Found by an outside test: a user's table naming only the administrator's group (which it may
    not, so the group was dropped) still opened a forward that refused every call."""
    broker = Broker(desktop, idp, start=False)
    broker.user_dir.mkdir(parents=True, exist_ok=True)
    (broker.user_dir / "config.toml").write_text(forward_table())  # names the administrator's group
    broker.start()
    try:
        program, marker = marker_ssh(tmp_path)
        done = broker.msso("ssh", "--ssh", program, f"{REMOTE_USER}@{HOST}", "true")
        assert done.returncode == 7, done.stderr
        assert f'the [forward."{HOST}"] table ({broker.user_dir}/config.toml' in done.stderr, done.stderr
        assert "gives host" in done.stderr and "no access group this broker has" in done.stderr and "msso doctor" in done.stderr
        assert not marker.exists(), "ssh never ran"
        assert not list((desktop.runtime / "msso").glob("forwards/*")), "no socket was made"
    finally:
        broker.stop()


def test_the_administrator_can_forbid_forwarding(desktop, idp, tmp_path):
    broker = Broker(desktop, idp, start=False)
    with open(broker.config, "a") as config:
        config.write("[policy]\nforwarding = false\n")
    broker.user_dir.mkdir(parents=True, exist_ok=True)
    (broker.user_dir / "config.toml").write_text(forward_table())  # the user's table does not lift it
    broker.start()
    try:
        program, marker = marker_ssh(tmp_path)
        done = broker.msso("ssh", "--ssh", program, f"{REMOTE_USER}@{HOST}", "true")
        assert done.returncode == 7, done.stderr
        assert "your administrator has turned SSH forwarding off ([policy] forwarding = false" in done.stderr
        assert not marker.exists()
    finally:
        broker.stop()


def test_verbs_and_groups_outside_the_hosts_table_are_refused_on_the_remote_host(desktop, idp, sshd):
    broker = forwarding_broker(desktop, idp, forward_table(verbs=["token", "sign", "status", "check", "login"]),
                               groups={GROUP: {}, OTHER: {}})
    try:
        command = remote(
            f"msso logout --group {GROUP}; echo \"logout=$?\"; "
            f"echo alice-pass | msso login --group {GROUP} --username alice --password-stdin; echo \"password-login=$?\"; "
            f"echo a-passphrase | msso lock --passphrase-stdin; echo \"lock=$?\"; "
            f"msso check --group {OTHER}; echo \"other-check=$?\"; "
            f"msso token --group {OTHER}; echo \"other-token=$?\"; "
            f"msso status --json; echo \"status=$?\"; "
            f"msso token --group {GROUP} >/dev/null; echo \"token=$?\"; "
            f"msso sign --group {GROUP} --url https://api.example.com/ >/dev/null; echo \"sign=$?\"")
        done = msso_ssh(broker, sshd, command)
        assert done.returncode == 0, done.stderr
        codes = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line and not line.startswith(" "))
        assert codes["logout"] == "7" and f'host {HOST} may not call logout: its [forward."{HOST}"] table' in done.stderr
        assert 'add "logout" to its `verbs` there' in done.stderr
        assert codes["password-login"] == "7" and "only a device login works" in done.stderr
        assert codes["lock"] != "0" and "may not call lock through an SSH forward" in done.stderr
        assert codes["other-check"] == "7" and codes["other-token"] == "7"
        assert f'host {HOST} may not use access group "{OTHER}" through the SSH forward' in done.stderr
        status = json.loads(done.stdout[done.stdout.index("{"):done.stdout.rindex("}") + 1])
        assert [group["group"] for group in status["groups"]] == [GROUP], "status lists the host's groups only"
        assert codes["token"] == "0" and codes["sign"] == "0", "what the table allows works"
        assert broker.msso("check", "--group", GROUP).returncode == 0, "the refused logout ended nothing"
        refused = [row for row in json.loads(broker.msso("audit", "--json").stdout) if row.get("host") == HOST and row["outcome"] == "error"]
        assert {row["verb"] for row in refused} >= {"logout", "login", "lock", "check", "token"}, "refusals are audited with the host"
    finally:
        broker.stop()


def test_the_forward_ends_with_the_ssh_session_and_serves_only_the_ssh_it_was_made_for(desktop, idp, sshd):
    broker = forwarding_broker(desktop, idp, forward_table())
    try:
        session = subprocess.Popen([BIN / "msso", "ssh", f"{REMOTE_USER}@{HOST}",
                                    *sshd.arguments(remote(f'echo "$MSSO_SOCKET"; msso check -q && echo checked; python3 -c {shlex.quote(HELLO)}; read line'))],
                                   env=broker.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        remote_socket = Path(session.stdout.readline().strip())
        assert session.stdout.readline().strip() == "checked", "the remote host reached the broker"
        peer = json.loads(session.stdout.readline())["result"]["peer"]
        assert peer["host"] == HOST and "executable" not in peer, "hello says how the broker sees the caller: as the host"
        forwards = desktop.runtime / "msso" / "forwards"
        (local,) = forwards.glob("*.sock")
        assert forwards.stat().st_mode & 0o777 == 0o700 and local.stat().st_mode & 0o777 == 0o600
        assert remote_socket.lstat().st_uid == sshd.uid and remote_socket.lstat().st_mode & 0o777 == 0o600

        # Another program of the user is not the remote host: the forward's socket refuses it.
        intruder = RawClient(local, hello=False)
        refusal = intruder.receive()
        intruder.close()
        assert refusal["error"] == "Forbidden" and "for the msso ssh that asked for it" in refusal["message"], refusal

        session.stdin.write("\n")
        session.stdin.close()
        assert session.wait(timeout=30) == 0, session.stderr.read()
        wait_for(lambda: not local.exists(), what="the forward's socket removed when the session ended")
        assert not answers(local)
        # sshd's side of the session ends a moment after the client's.
        wait_for(lambda: not answers(remote_socket), what="nothing answering on the remote host either")
        assert broker.logged("forward closed") >= 1
    finally:
        broker.stop()


@pytest.mark.skipif(not (shutil.which("dunst") and shutil.which("Xvfb")), reason="needs dunst and xvfb (scripts/setup installs them)")
def test_each_new_request_from_the_host_asks_the_user_who_may_deny_or_allow(desktop, idp, sshd):
    from test_confirm import Picker
    from test_notifications import Dunst

    broker = forwarding_broker(desktop, idp, forward_table(confirm=None))  # confirm: on by default
    picker = Picker(desktop.home)
    dunst = Dunst(desktop, dmenu=picker.script)
    try:
        def ask():
            return subprocess.Popen([BIN / "msso", "ssh", f"{REMOTE_USER}@{HOST}", *sshd.arguments(remote(f"msso token --group {GROUP}"))],
                                    env=broker.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def questions():
            return [n for n in dunst.notifications() if n.get("summary", "").startswith("Allow ")]

        denied = ask()
        question = wait_for(lambda: questions()[-1:] or None, timeout=20, what="the question")[0]
        assert question["summary"] == f"Allow {HOST} to use SSO for {GROUP}?"
        assert question["body"] == f"A program on {HOST}, reached through msso ssh, asks for a token (token) of {GROUP}."
        assert {"Allow once", "Allow for 1 hour", "Deny"} <= set(question["actions"])
        picker.choose("Deny", dunst)
        out, err = denied.communicate(timeout=60)
        assert denied.returncode == 7 and out == "", err
        assert f"you did not allow host {HOST} to token with \"{GROUP}\"" in err

        allowed = ask()
        wait_for(lambda: len(questions()) == 2 or None, timeout=20, what="asked again: the answer was no")
        picker.choose("Allow once", dunst)
        out, err = allowed.communicate(timeout=60)
        assert allowed.returncode == 0 and len(out.strip()) > 20, err
        SECRETS.add(out.strip())
    finally:
        dunst.stop()
        broker.stop()


def test_a_remote_host_gets_each_servers_own_minted_token(desktop, sshd):
    """`tokens = "per-resource"` through `msso ssh`: the remote host's calls pass the same gate, so
    a token it is given for git is minted for git's entry alone (glewlwyd, RFC 8707)."""
    from harness import IdP
    git, api = "http://127.0.0.1:9/git/", "http://127.0.0.1:9/"
    idp = IdP(resources=[api, git], refresh_one_use="never")
    broker = Broker(desktop, idp, groups={GROUP: {"resources": [api, git], "tokens": "per-resource"}}, start=False)
    try:
        with open(broker.config, "a") as config:
            config.write(forward_table(verbs=["token"]))
        broker.start()
        assert broker.device_login(idp).returncode == 0
        done = msso_ssh(broker, sshd, remote(f"msso token --group {GROUP} --resource {git}x.git; msso token --group {GROUP} --resource {api}v1"))
        assert done.returncode == 0, done.stderr
        for_git, for_api = done.stdout.split()
        SECRETS.update([for_git, for_api])
        assert idp.introspect(for_git)["aud"] == git and idp.introspect(for_api)["aud"] == api
    finally:
        broker.stop()
        idp.cleanup()


def test_a_hosts_table_names_the_accounts_it_may_use(desktop, idp, sshd):
    """`accounts = ["admin"]` in a host's table: a call from the host naming no account gets the
    admin account's token (bob's), one naming another account is refused naming the table, and
    its status shows the admin account alone; the audit row names the account."""
    broker = forwarding_broker(desktop, idp, forward_table() + 'accounts = ["admin"]\n')
    try:
        assert broker.login("bob", account="admin").returncode == 0
        command = remote("msso token; echo \"token=$?\"; msso token --account default; echo \"other=$?\"; "
                         "msso status --json; echo \"status=$?\"")
        done = msso_ssh(broker, sshd, command)
        assert done.returncode == 0, done.stderr
        codes = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line and not line.startswith(" "))
        assert codes["token"] == "0" and codes["other"] == "7", done.stdout + done.stderr
        token = done.stdout.splitlines()[0].strip()
        SECRETS.add(token)
        assert idp.introspect(token)["username"] == "bob"
        assert "may not use the account default through the SSH forward" in done.stderr
        status = json.loads(done.stdout[done.stdout.index("{"):done.stdout.rindex("}") + 1])
        assert [(row["group"], row["account"]) for row in status["groups"]] == [(GROUP, "admin")]
        rows = [row for row in json.loads(broker.msso("audit", "--json").stdout) if row.get("host") == HOST and row["verb"] == "token"]
        assert rows and rows[0].get("account") == "admin", rows
    finally:
        broker.stop()
