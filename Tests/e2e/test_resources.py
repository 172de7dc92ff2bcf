"""A group's `resources` (problem 6): the servers its tokens are for, held by the daemon.

Registered tools (msso, git-credential-msso) hand the token to whoever runs them; with
`resources`, the daemon gives a token or a signature only for a URL within them, so that a tool
asked to send it elsewhere (git with a hostile remote, a kubeconfig naming another server, a
script) gets nothing. Real git against the local token server; the protocol's `token` method
through a raw client, as any program could call it."""
import json
import subprocess

import pytest

from harness import BIN, GROUP, PYTHON, SECRETS, Broker, RawClient
from test_tools import KUBECTL, git, git_env, kubeconfig, repos, server  # noqa: F401 (fixtures)
from token_server import TokenServer


def helper_get(broker, request: str):
    return subprocess.run([BIN / "git-credential-msso", "--group", GROUP, "get"], input=request, env=broker.env,
                          capture_output=True, text=True, timeout=30)


def fields(done):
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


@pytest.fixture
def guarded(desktop, idp, server):  # noqa: F811
    """A group whose tokens are for the token server only; msso and the git helper registered."""
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": [f"{server.url}/"]}})
    daemon.register("git-helper", [BIN / "git-credential-msso"], [GROUP])
    assert daemon.login().returncode == 0
    yield daemon
    daemon.stop()


def test_the_git_helper_answers_only_for_the_groups_resources(guarded, server, repos, tmp_path):  # noqa: F811
    refused = helper_get(guarded, "protocol=https\nhost=attacker.example\n\n")
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout == "", "no credential (and no quit=1: git may ask its next helper)"
    assert '"https://attacker.example"' in refused.stderr and "is not one of the resources" in refused.stderr, refused.stderr
    assert server.url in refused.stderr, "the sentence names the group's resources"

    host = server.url.split("://", 1)[1]
    answered = helper_get(guarded, f"protocol=http\nhost={host}\n\n")
    assert "password" in fields(answered), answered.stderr
    SECRETS.add(fields(answered)["password"])

    # Real git: the group's server gets the token; another server (another origin) does not.
    env = git_env(guarded, tmp_path / "home")
    assert git(["ls-remote", f"{server.url}/git/suite.git"], env).returncode == 0
    assert server.seen
    SECRETS.update(server.seen)


def test_real_git_sends_no_token_to_another_server(guarded, idp, repos, tmp_path):  # noqa: F811
    other = TokenServer(idp, repos)  # a server of the same kind on another port: another origin
    try:
        env = git_env(guarded, tmp_path / "home")
        done = git(["ls-remote", f"{other.url}/git/suite.git"], env, timeout=30)
        assert done.returncode != 0
        assert "is not one of the resources" in done.stderr, done.stderr
        assert not other.seen, "no token reached the other server"
    finally:
        other.close()


def test_a_path_prefix_with_gits_use_http_path(desktop, idp, server, tmp_path):  # noqa: F811
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": [f"{server.url}/git/suite.git"]}})
    daemon.register("git-helper", [BIN / "git-credential-msso"], [GROUP])
    try:
        assert daemon.login().returncode == 0
        host = server.url.split("://", 1)[1]
        assert helper_get(daemon, f"protocol=http\nhost={host}\n\n").stdout == "", "the origin alone is not within"
        assert helper_get(daemon, f"protocol=http\nhost={host}\npath=git/other.git\n\n").stdout == ""
        assert helper_get(daemon, f"protocol=http\nhost={host}\npath=git/suite.gitx\n\n").stdout == ""
        within = helper_get(daemon, f"protocol=http\nhost={host}\npath=git/suite.git/info/refs\n\n")
        assert "password" in fields(within), within.stderr
        SECRETS.add(fields(within)["password"])
        # git sends the path decoded: the helper encodes it again (a space is no reason to refuse,
        # and a decoded `..` is still a dot segment).
        spaced = helper_get(daemon, f"protocol=http\nhost={host}\npath=git/suite.git/a b\n\n")
        assert "password" in fields(spaced), spaced.stderr
        assert helper_get(daemon, f"protocol=http\nhost={host}\npath=git/suite.git/../other.git\n\n").stdout == ""
        env = git_env(daemon, tmp_path / "home")
        done = git(["-c", "credential.useHttpPath=true", "ls-remote", f"{server.url}/git/suite.git"], env)
        assert done.returncode == 0, done.stderr
        SECRETS.update(server.seen)
    finally:
        daemon.stop()


def test_msso_token_and_exec_need_a_resource_within(guarded, server):  # noqa: F811
    bare = guarded.msso("token")
    assert bare.returncode == 7 and bare.stdout == ""
    assert "hands out its token only for its resources" in bare.stderr and f"{server.url}/" in bare.stderr, bare.stderr
    assert "--resource" in bare.stderr, "the sentence says the fix"

    outside = guarded.msso("token", "--resource", "https://attacker.example/")
    assert outside.returncode == 7 and outside.stdout == ""
    assert "is not one of the resources of the access group" in outside.stderr and "`resources`" in outside.stderr

    # Tricks that only look like the server: user info, another port, a backslash.
    authority = server.url.split("://", 1)[1]
    for trick in [f"http://{authority}@attacker.example/", f"http://{authority}0/", f"http://{authority}\\@attacker.example/",
                  f"https://{authority}/"]:
        done = guarded.msso("token", f"--resource={trick}")
        assert done.returncode == 7, (trick, done.stdout)

    inside = guarded.msso("token", "--resource", f"{server.url}/me")
    assert inside.returncode == 0 and inside.stdout.strip(), inside.stderr
    SECRETS.add(inside.stdout.strip())
    assert guarded.msso("token", "--format", "json", "--resource", f"{server.url.upper()}/x").returncode == 0, \
        "scheme and host compare case-insensitively"

    printed = guarded.msso("exec", "--", "env")
    assert printed.returncode == 7 and "MSSO_ACCESS_TOKEN" not in printed.stdout
    ran = guarded.msso("exec", "--resource", f"{server.url}/me", "--", PYTHON, "-c",
                       "import os; print(len(os.environ['MSSO_ACCESS_TOKEN']) > 0)")
    assert ran.returncode == 0 and ran.stdout.strip() == "True", ran.stderr


def test_msso_sign_outside_the_resources_is_refused(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": ["https://api.example.com/team/", "https://k8s.example.com:6443"]}})
    try:
        assert daemon.login().returncode == 0
        for url in ["https://attacker.example/team/", "https://api.example.com/", "https://api.example.com/teams",
                    "http://api.example.com/team/", "https://api.example.com:444/team/",
                    "https://k8s.example.com/", "https://api.example.com@attacker.example/team/"]:
            done = daemon.msso("sign", "--url", url)
            assert done.returncode == 7 and done.stdout == "", (url, done.stdout)
            assert "is not one of the resources" in done.stderr and "https://api.example.com/team/" in done.stderr, done.stderr
        # Under the prefix as written, but a server would resolve it elsewhere: the sentence says which segment.
        for url, segment in [("https://api.example.com/team/../admin", ".."), ("https://api.example.com/team/%2e%2e/admin", "%2e%2e"),
                             ("https://api.example.com/team/a%2Fb", "a%2Fb")]:
            done = daemon.msso("sign", "--url", url)
            assert done.returncode == 7 and done.stdout == "", (url, done.stdout)
            assert f'only as written: its path\'s segment "{segment}"' in done.stderr, done.stderr
        for url in ["https://api.example.com/team/", "https://API.Example.com:443/team/x?y=1", "https://k8s.example.com:6443/api/v1"]:
            done = daemon.msso("sign", "--url", url)
            assert done.returncode == 0 and done.stdout.startswith("Authorization: Bearer "), (url, done.stderr)
    finally:
        daemon.stop()


# Segments a server could resolve outside `/team/` (an outside security test got tokens and
# signatures for `..;`: Tomcat drops a segment's `;params` before resolving, so `/team/..;/admin/x`
# ran `/admin` with msso's token), and what stays within (only the path is resolved).
ESCAPING = [("..;/admin/x", "..;"), ("..;jsessionid=x/admin", "..;jsessionid=x"), (".;/x", ".;"),
            ("%2e%2e;x/admin", "%2e%2e;x"), ("%2E./admin", "%2E."), ("..%3b/admin", "..%3b"), ("..%3f/admin", "..%3f"),
            ("%252e%252e/admin", "%252e%252e"), ("%25252E%25252e/admin", "%25252E%25252e"), ("a%252fb", "a%252fb"),
            # A blind attack's, each given a token before: IIS's %u, trailing spaces and dots that
            # Windows drops, overlong UTF-8 (old Java decoders), full-width dots (NFKC), slashes
            # folded to `/`.
            ("%u002e%u002e/admin", "%u002e%u002e"), ("x%u2215..%u2215admin", "x%u2215..%u2215admin"), ("..%20/admin", "..%20"),
            ("..%09/admin", "..%09"), ("%c0%ae%c0%ae/admin", "%c0%ae%c0%ae"), ("..%c0%af", "..%c0%af"),
            ("%e0%80%ae%e0%80%ae/admin", "%e0%80%ae%e0%80%ae"), ("%ef%bc%8e%ef%bc%8e/admin", "%ef%bc%8e%ef%bc%8e"),
            ("..%2e/admin", "..%2e"), (".../admin", "...")]
WITHIN = ["x?next=../../admin", "x#/../admin", "x;jsessionid=abc/y", "a%20b", "a;../x", "%c3%a9t%c3%a9", "x%20.."]


def test_a_segment_a_server_reads_as_a_dot_segment_gets_no_token_or_signature(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": ["https://api.example.com/team/"]}})
    try:
        assert daemon.login().returncode == 0
        for path, segment in ESCAPING:
            url = f"https://api.example.com/team/{path}"
            for argv in (["sign", "--url", url], ["token", f"--resource={url}"]):
                done = daemon.msso(*argv)
                assert done.returncode == 7 and done.stdout == "", (argv, done.stdout)
                assert f'its path\'s segment "{segment}" ' in done.stderr and "https://api.example.com/team/" in done.stderr, done.stderr
                assert "send the request to its path resolved" in done.stderr and "`resources`" in done.stderr, done.stderr
        for path in WITHIN:
            url = f"https://api.example.com/team/{path}"
            signed = daemon.msso("sign", "--url", url)
            assert signed.returncode == 0 and signed.stdout.startswith("Authorization: Bearer "), (url, signed.stderr)
            token = daemon.msso("token", f"--resource={url}")
            assert token.returncode == 0 and token.stdout.strip(), (url, token.stderr)
            SECRETS.add(token.stdout.strip())
    finally:
        daemon.stop()


def test_git_gets_no_token_for_a_dot_segment_under_a_path_prefix(desktop, idp, server, tmp_path):  # noqa: F811
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": [f"{server.url}/git/suite.git"]}})
    daemon.register("git-helper", [BIN / "git-credential-msso"], [GROUP])
    try:
        assert daemon.login().returncode == 0
        host = server.url.split("://", 1)[1]
        # git sends the path decoded, and the helper encodes it again: `%2e` from git is `%252e`,
        # which a server that decodes twice reads as `.`.
        for path, segment in [("git/suite.git/..;/other.git", "..;"), ("git/suite.git/%2e%2e/other.git", "%252e%252e"),
                              ("git/suite.git/..;x/other.git", "..;x")]:
            refused = helper_get(daemon, f"protocol=http\nhost={host}\npath={path}\n\n")
            assert refused.returncode == 0 and refused.stdout == "", (path, refused.stdout)
            assert f'segment "{segment}"' in refused.stderr, refused.stderr
        # Real git, asking with the path: no token reaches the server for either remote.
        env = git_env(daemon, tmp_path / "home")
        for remote in [f"{server.url}/git/suite.git/..;/other.git", f"{server.url}/git/suite.git/%252e%252e/other.git"]:
            done = git(["-c", "credential.useHttpPath=true", "ls-remote", remote], env, timeout=30)
            assert done.returncode != 0 and "segment" in done.stderr, (remote, done.stderr)
        assert not server.seen and server.refused >= 2, "no token reached the server"
        within = git(["-c", "credential.useHttpPath=true", "ls-remote", f"{server.url}/git/suite.git"], env)
        assert within.returncode == 0, within.stderr
        SECRETS.update(server.seen)
    finally:
        daemon.stop()


def test_the_token_method_without_a_resource_is_refused_by_the_daemon(guarded, server):  # noqa: F811
    """Any program can speak the protocol: the daemon, not the tools, holds the line."""
    client = RawClient(guarded.socket)  # Python is registered for the group (harness)
    try:
        bare = client.call("token", {"group": GROUP})
        assert bare["type"] == "error" and bare["error"] == "ResourceForbidden", bare
        assert f"{server.url}/" in bare["message"]
        outside = client.call("token", {"group": GROUP, "resource": "https://attacker.example/"})
        assert outside["type"] == "error" and outside["error"] == "ResourceForbidden", outside
        signed = client.call("sign", {"group": GROUP, "method": "GET", "url": "https://attacker.example/"})
        assert signed["type"] == "error" and signed["error"] == "ResourceForbidden", signed
        within = client.call("token", {"group": GROUP, "resource": f"{server.url}/me"})
        assert within["type"] == "reply" and within["result"]["accessToken"], within
        SECRETS.add(within["result"]["accessToken"])
    finally:
        client.close()


def test_a_group_without_resources_hands_out_its_token_with_or_without_one(broker):
    assert broker.login().returncode == 0
    for argv in [[], ["--resource", "https://anywhere.example/"]]:
        done = broker.msso("token", *argv)
        assert done.returncode == 0 and done.stdout.strip(), done.stderr
        SECRETS.add(done.stdout.strip())


def test_the_kubectl_plugin_passes_the_cluster_server(guarded, server):  # noqa: F811
    def plugin(cluster_server):
        info = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                "spec": {"interactive": False, "cluster": {"server": cluster_server}}}
        return subprocess.run([BIN / "msso", "token", "--format", "kubernetes"], capture_output=True, text=True,
                              env=dict(guarded.env, KUBERNETES_EXEC_INFO=json.dumps(info)), timeout=30)
    refused = plugin("https://attacker.example:6443")
    assert refused.returncode == 7 and refused.stdout == "" and "is not one of the resources" in refused.stderr
    given = plugin(server.url)
    assert given.returncode == 0, given.stderr
    SECRETS.add(json.loads(given.stdout)["status"]["token"])
    # Found by an outside test: a hostile kubeconfig names a listed server in the plugin's args and
    # its own as the cluster's (without provideClusterInfo): kubectl's word wins, and it named none.
    info = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "spec": {"interactive": False}}
    argued = subprocess.run([BIN / "msso", "token", "--format", "kubernetes", "--resource", f"{server.url}/"], capture_output=True,
                            text=True, env=dict(guarded.env, KUBERNETES_EXEC_INFO=json.dumps(info)), timeout=30)
    assert argued.returncode == 7 and argued.stdout == "" and "provideClusterInfo: true" in argued.stderr, argued.stderr
    info["spec"]["cluster"] = {"server": server.url, "insecure-skip-tls-verify": True}
    unchecked = subprocess.run([BIN / "msso", "token", "--format", "kubernetes"], capture_output=True, text=True,
                               env=dict(guarded.env, KUBERNETES_EXEC_INFO=json.dumps(info)), timeout=30)
    assert unchecked.returncode == 7 and unchecked.stdout == "" and "insecure-skip-tls-verify" in unchecked.stderr, unchecked.stderr


@pytest.mark.skipif(not KUBECTL.exists(), reason="Debian's kubectl is unpacked by scripts/setup")
def test_real_kubectl_with_provide_cluster_info(desktop, idp, repos, tmp_path):  # noqa: F811
    served = TokenServer(idp, repos, tls=True)
    broker = Broker(desktop, idp, groups={GROUP: {"resources": [f"{served.url}/"]}})
    try:
        assert broker.login().returncode == 0
        path = kubeconfig(tmp_path / "kubeconfig", served)
        config = json.loads(path.read_text())
        config["users"][0]["user"]["exec"]["provideClusterInfo"] = True
        path.write_text(json.dumps(config))
        env = dict(broker.env, KUBECONFIG=str(path), HOME=str(tmp_path))
        listed = subprocess.run([KUBECTL, "get", "namespaces"], env=env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        SECRETS.update(served.seen)
        # Without the cluster's server the plugin names no resource: refused, with the fix.
        del config["users"][0]["user"]["exec"]["provideClusterInfo"]
        path.write_text(json.dumps(config))
        denied = subprocess.run([KUBECTL, "get", "namespaces"], env=env, capture_output=True, text=True, timeout=60)
        assert denied.returncode != 0 and "only for its resources" in denied.stderr, denied.stderr
    finally:
        broker.stop()
        served.close()


def test_a_bad_resources_entry_is_refused_with_file_and_line(broker, tmp_path):
    text = broker.config.read_text()
    for bad, words in [('["https://*.example.com/"]', "is not a URL prefix"), ('["http://git.example.com/"]', "only on loopback"),
                       ("[]", "empty list"), ('["https://git.example.com/?q=1"]', "is not a URL prefix"),
                       ('["https://user@git.example.com/"]', "is not a URL prefix"), ('["https://git.example.com/a/../b"]', "dot segment")]:
        broker.config.write_text(text + f"resources = {bad}\n")
        line = len(text.splitlines()) + 1
        done = subprocess.run([BIN / "msso", "doctor"], env=dict(broker.env, MSSO_PAM_DIR=str(tmp_path), SYSTEMD_UNIT_PATH=str(tmp_path)),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 78, done.stdout
        assert f"{broker.config}:{line}: `resources`: " in done.stdout and words in done.stdout, (bad, done.stdout)
