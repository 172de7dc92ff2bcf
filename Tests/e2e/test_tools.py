"""The tools people already run share the login: real git (through git-credential-msso and
`git http-backend`), real kubectl (Debian's kubernetes-client, as an exec credential plugin),
real curl (with `msso token`) and any program (with `msso exec`), against a server that accepts
only tokens the real IdP says are active."""
import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness import BIN, GROUP, PYTHON, SECRETS, Broker, IdP, sleep_until, wait_for
from token_server import TokenServer

KUBECTL = Path("/var/cache/msso-test-tools/kubernetes-client/usr/bin/kubectl")  # scripts/setup unpacks it


def git_env(broker, home: Path, path_first: Path = BIN):
    """git's environment: the broker's session, a HOME whose .gitconfig names the helper, no prompts."""
    home.mkdir(exist_ok=True)
    (home / ".gitconfig").write_text(
        f'[credential]\n\thelper = "msso --group {GROUP}"\n[user]\n\tname = Alice\n\temail = alice@example.com\n'
        '[init]\n\tdefaultBranch = main\n')
    return dict(broker.env, HOME=str(home), PATH=f"{path_first}:{os.environ['PATH']}", GIT_TERMINAL_PROMPT="0",
                GIT_ASKPASS="/bin/false")


def git(argv, env, cwd=None, timeout=60):
    return subprocess.run(["git", *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def repos(tmp_path):
    """A bare repository with one commit, served by the token server."""
    root = tmp_path / "repos"
    seed = tmp_path / "seed"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(root / "suite.git")], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(seed)], check=True)
    (seed / "README").write_text("suite\n")
    for argv in (["add", "README"], ["-c", "user.name=seed", "-c", "user.email=s@e", "commit", "-qm", "first"],
                 ["push", "-q", str(root / "suite.git"), "main"]):
        subprocess.run(["git", *argv], cwd=seed, check=True)
    return root


@pytest.fixture
def server(idp, repos):
    served = TokenServer(idp, repos)
    yield served
    served.close()


@pytest.fixture
def tools_broker(desktop, idp):
    daemon = Broker(desktop, idp)
    daemon.register("git-helper", [BIN / "git-credential-msso"], [GROUP])  # as the administrator would
    assert daemon.login().returncode == 0
    yield daemon
    daemon.stop()


def test_git_clones_and_pushes_through_the_helper(tools_broker, server, tmp_path):
    env = git_env(tools_broker, tmp_path / "home")
    work = tmp_path / "work"
    cloned = git(["clone", "-q", f"{server.url}/git/suite.git", str(work)], env)
    assert cloned.returncode == 0, cloned.stderr
    assert (work / "README").read_text() == "suite\n"
    (work / "CHANGES").write_text("a change\n")
    assert git(["add", "CHANGES"], env, cwd=work).returncode == 0
    assert git(["commit", "-qm", "a change"], env, cwd=work).returncode == 0
    pushed = git(["push", "-q", "origin", "main"], env, cwd=work)
    assert pushed.returncode == 0, pushed.stderr
    log = subprocess.run(["git", "--git-dir", str(server.git_root / "suite.git"), "log", "--format=%s"],
                         capture_output=True, text=True).stdout.split()
    assert log[0] == "change" or "change" in log, log
    assert server.seen, "the server saw the broker's token"
    SECRETS.update(server.seen)


def test_after_logout_git_fails_at_once_and_says_how_to_log_in(tools_broker, server, tmp_path):
    env = git_env(tools_broker, tmp_path / "home")
    assert git(["ls-remote", f"{server.url}/git/suite.git"], env).returncode == 0
    SECRETS.update(server.seen)
    assert tools_broker.msso("logout").returncode == 0
    started = time.monotonic()
    done = git(["ls-remote", f"{server.url}/git/suite.git"], env, timeout=10)
    took = time.monotonic() - started
    assert done.returncode != 0
    assert took < 1, f"git took {took:.2f} s to give up"
    assert f"run `msso login --group {GROUP}`" in done.stderr, done.stderr
    assert "Username for" not in done.stderr, "nobody prompted"


def test_an_unregistered_copy_of_the_helper_gets_no_token(tools_broker, server, tmp_path):
    elsewhere = tmp_path / "bin"
    elsewhere.mkdir()
    shutil.copy2(BIN / "git-credential-msso", elsewhere / "git-credential-msso")
    env = git_env(tools_broker, tmp_path / "home", path_first=elsewhere)
    done = git(["ls-remote", f"{server.url}/git/suite.git"], env, timeout=10)
    assert done.returncode != 0
    assert f"{elsewhere / 'git-credential-msso'} is not registered for access group" in done.stderr, done.stderr
    assert not server.seen, "no token reached the server"


def test_erase_renews_the_token_and_never_logs_out(tools_broker, tmp_path):
    helper = [BIN / "git-credential-msso", "--group", GROUP]
    request = "protocol=https\nhost=git.example.com\n\n"
    first = subprocess.run([*helper, "get"], input=request, env=tools_broker.env, capture_output=True, text=True)
    fields = dict(line.split("=", 1) for line in first.stdout.splitlines())
    assert fields.get("username") == "oauth2" and fields["host"] == "git.example.com", first.stderr
    assert int(fields["password_expiry_utc"]) > time.time()
    SECRETS.add(fields["password"])
    # The token was issued at or before this second: the renewed one must be issued at another.
    got = int(time.time())
    wait_for(lambda: int(time.time()) > got, what="the next second")
    erased = subprocess.run([*helper, "erase"], input=request + f"password={fields['password']}\n", env=tools_broker.env,
                            capture_output=True, text=True)
    assert erased.returncode == 0 and erased.stdout == ""
    again = subprocess.run([*helper, "get"], input=request, env=tools_broker.env, capture_output=True, text=True)
    second = dict(line.split("=", 1) for line in again.stdout.splitlines())
    assert "password" in second, again.stderr
    SECRETS.add(second["password"])
    assert second["password"] != fields["password"], "the next get has a freshly refreshed token"
    assert tools_broker.msso("check").returncode == 0, "and the session goes on"
    stored = subprocess.run([*helper, "store"], input=request, env=tools_broker.env, capture_output=True, text=True)
    assert stored.returncode == 0 and stored.stdout == ""


def kubeconfig(path: Path, server, api_version="client.authentication.k8s.io/v1beta1"):
    """A kubeconfig whose user is the msso exec plugin (client-go sends credentials only over TLS)."""
    authority = base64.b64encode(server.certificate.read_bytes()).decode()
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "msso",
        "clusters": [{"name": "local", "cluster": {"server": server.url, "certificate-authority-data": authority}}],
        "users": [{"name": "alice", "user": {"exec": {"apiVersion": api_version, "command": str(BIN / "msso"),
                                                       "args": ["token", "--group", GROUP, "--format", "kubernetes"]}}}],
        "contexts": [{"name": "msso", "context": {"cluster": "local", "user": "alice"}}],
    }))
    return path


@pytest.mark.skipif(not KUBECTL.exists(), reason="Debian's kubectl is unpacked by scripts/setup")
def test_kubectl_authenticates_with_the_exec_plugin_and_after_a_refresh(desktop, tmp_path, repos):
    short = IdP(token_ttl=8)
    served = broker = None
    try:  # what started is stopped also when the next part fails to start
        served = TokenServer(short, repos, tls=True)
        broker = Broker(desktop, short, groups={GROUP: {"refresh_lead": "3s"}})
        assert broker.login().returncode == 0
        env = dict(broker.env, KUBECONFIG=str(kubeconfig(tmp_path / "kubeconfig", served)), HOME=str(tmp_path))
        listed = subprocess.run([KUBECTL, "get", "namespaces"], env=env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert "msso-test" in listed.stdout
        first = set(served.seen)
        # Until the access token is within the refresh lead (3 s of its 8): the broker renews it.
        sleep_until(broker.status_json()["accessTokenExpiresAt"] - 3 + 0.2)
        again = subprocess.run([KUBECTL, "get", "namespaces"], env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        assert set(served.seen) - first, "kubectl came back with a refreshed token"
        SECRETS.update(served.seen)
    finally:
        if broker:
            broker.stop()
        if served:
            served.close()
        short.cleanup()


def test_token_formats_and_the_kubernetes_version_kubectl_asks_for(tools_broker):
    raw = tools_broker.msso("token").stdout.strip()
    SECRETS.add(raw)
    assert tools_broker.msso("token", "--format", "header").stdout.strip() == f"Authorization: Bearer {raw}"
    as_json = json.loads(tools_broker.msso("token", "--format", "json").stdout)
    assert as_json["accessToken"] == raw and int(as_json["expiresAt"]) > time.time() and as_json["expiresAtUTC"].endswith("Z")
    v1 = subprocess.run([BIN / "msso", "token", "--format", "kubernetes"], capture_output=True, text=True,
                        env=dict(tools_broker.env, KUBERNETES_EXEC_INFO=json.dumps(
                            {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "spec": {"interactive": False}})))
    credential = json.loads(v1.stdout)
    assert credential["apiVersion"] == "client.authentication.k8s.io/v1" and credential["kind"] == "ExecCredential"
    assert credential["status"]["token"] == raw and credential["status"]["expirationTimestamp"].endswith("Z")
    assert json.loads(tools_broker.msso("token", "--format", "kubernetes").stdout)["apiVersion"] == "client.authentication.k8s.io/v1beta1"


def test_curl_with_msso_token(tools_broker, server):
    done = subprocess.run(["bash", "-c", f'curl -sf --oauth2-bearer "$({BIN / "msso"} token)" {server.url}/me'],
                          env=tools_broker.env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["path"] == "/me"
    SECRETS.update(server.seen)


# Run by `msso exec` as the child: call the server with the token from the environment, and look
# for the token in every process's argv while it runs.
CHILD = r"""
import json, os, sys, urllib.request
token = os.environ["MSSO_ACCESS_TOKEN"]
request = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + token})
status = urllib.request.urlopen(request, timeout=10).status
in_argv = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            if token.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                in_argv.append(pid)
        except OSError:
            pass
print(json.dumps({"status": status, "expires": os.environ["MSSO_ACCESS_TOKEN_EXPIRES_AT"], "in_argv": in_argv}))
sys.exit(3)
"""


def test_msso_exec_hands_the_token_to_the_child_never_in_argv(tools_broker, server):
    done = tools_broker.msso("exec", "--", PYTHON, "-c", CHILD, f"{server.url}/me")
    assert done.returncode == 3, "the exit status is the command's"
    result = json.loads(done.stdout)
    assert result["status"] == 200 and int(result["expires"]) > time.time()
    assert result["in_argv"] == [], "the token is in no process's argv"
    SECRETS.update(server.seen)


def test_msso_exec_help_prints_help_and_runs_nothing(tools_broker, tmp_path):
    """`msso exec --help` (an outside attack found it fetched the token and ran a program named
    `--help` found on PATH, which printed the token): help, and nothing run, no token asked for.
    Any other option-like word before the command is refused, pointing at --."""
    planted = tmp_path / "bin"
    planted.mkdir()
    marker = tmp_path / "ran"
    (planted / "--help").write_text(f'#!/bin/sh\necho "$MSSO_ACCESS_TOKEN" > {marker}\n')
    (planted / "--help").chmod(0o755)
    env = dict(tools_broker.env, PATH=f"{planted}:{tools_broker.env.get('PATH', '/usr/bin:/bin')}")
    done = subprocess.run([BIN / "msso", "exec", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "USAGE" in done.stdout.upper() and "--resource" in done.stdout, done.stderr
    assert not marker.exists(), "the planted program ran"
    other = subprocess.run([BIN / "msso", "exec", "--verbose", "ls"], env=env, capture_output=True, text=True, timeout=60)
    assert other.returncode == 64 and "goes after --" in other.stderr


def test_tokens_bound_to_the_brokers_key_are_not_handed_out(desktop, idp):
    broker = Broker(desktop, idp, groups={GROUP: {"sign": "dpop"}})
    try:
        assert broker.login().returncode == 0
        done = broker.msso("token")
        assert done.returncode == 7 and "bound to msso's key" in done.stderr and done.stdout == ""
    finally:
        broker.stop()


def test_the_quick_verbs_hand_anything_unusual_to_the_full_parser(tools_broker):
    """check, sign and token take a parser of their own; help, errors and unusual forms must
    still get ArgumentParser's answers, exactly."""
    helped = tools_broker.msso("check", "--help")
    assert helped.returncode == 0 and "--quiet" in helped.stdout and "USAGE" in helped.stdout.upper()
    bad_url = tools_broker.msso("sign", "--url", "not a url")
    assert bad_url.returncode == 64 and "--url must be an absolute URL" in bad_url.stderr
    unknown = tools_broker.msso("token", "--colour", "blue")
    assert unknown.returncode == 64 and "colour" in unknown.stderr
    missing = tools_broker.msso("sign")
    assert missing.returncode == 64 and "--url" in missing.stderr
    twice = tools_broker.msso("check", "--group", GROUP, "--group", GROUP)
    assert twice.returncode in (0, 64), "a repeated option goes to ArgumentParser, which decides"
    quick = tools_broker.msso("check", f"--group={GROUP}", "-q")
    assert quick.returncode == 0 and quick.stdout == ""
    assert tools_broker.msso("token", "--format=json").returncode == 0
