"""The Go library (clients/go, module `msso`) and the Docker credential helper built on it
(clients/go/cmd/docker-credential-msso), against the real daemon, keyring and IdP.

The module is built here with Debian's Go, offline (GOPROXY=off: it has no dependency), into a
temporary directory: its unit tests, and a test binary (`go test -c -tags e2e`) whose tests
(clients/go/e2e_test.go) run against brokers started here, each registered for the groups by
that binary's path, as a user would register a Go program. Every signing profile goes through
msso.Transport and net/http to a server that checks what it gets (api_server.py); the helper
serves real skopeo against a registry that accepts only active tokens (registry_server.py).
"""
import base64
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests

from harness import BIN, GROUP, PASSWORDS, ROOT, SECRETS, Broker, Desktop, PlantedSocket, as_uid
import hostile_replies
from hostile_replies import HostileBrokers
from registry_server import REPOSITORY, TAG, RegistryServer, digest

DPOP, SIGNED = "com.example.dpop", "com.example.signed"
MODULE = ROOT / "clients" / "go"
GO_ENV = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=readonly", GO111MODULE="on")
NOT_FOUND = "credentials not found in native keychain"  # Docker's helper protocol: no credentials here


def go(*argv, cwd=MODULE):
    done = subprocess.run(["go", *map(str, argv)], cwd=cwd, env=GO_ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"go {' '.join(map(str, argv))}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The test binary, the example and the helper, built from the sources as they are."""
    out = tmp_path_factory.mktemp("go")
    go("test", "-c", "-tags", "e2e", "-o", out / "msso.test", ".")
    go("build", "-o", out / "transport", "./examples/transport")
    go("build", "-o", out / "docker-credential-msso", "./cmd/docker-credential-msso")
    return SimpleNamespace(dir=out, tests=out / "msso.test", example=out / "transport", helper=out / "docker-credential-msso")


@pytest.fixture(scope="module")
def broker(idp, built):
    """One group; the Go test binary registered for it."""
    desktop = Desktop()
    daemon = Broker(desktop, idp, start=False)
    daemon.register("go-tests", [built.tests], [GROUP])
    daemon.start()
    yield daemon
    daemon.stop()
    desktop.cleanup()


@pytest.fixture(scope="module")
def registry(idp):
    server = RegistryServer(idp)
    yield server
    SECRETS.update(server.seen)
    server.close()


@pytest.fixture(scope="module")
def profiles(idp, api, registry, built):
    """A group per signing profile; the bearer group's tokens are for the API and the registry only.
    The test binary and the example are registered for all three, the helper for the bearer one."""
    desktop = Desktop()
    groups = {GROUP: {"resources": [f"{api.url}/", f"https://127.0.0.1:{registry.port}/"]}, DPOP: {"sign": "dpop"},
              SIGNED: {"sign": "http-signature"}}
    daemon = Broker(desktop, idp, groups=groups, start=False)
    daemon.register("go-tests", [built.tests, built.example], list(groups))
    daemon.register("docker-helper", [built.helper], [GROUP])
    daemon.start()
    key = json.loads(daemon.msso("keys", "--json", "--group", SIGNED).stdout)
    api.signature_key = (key["pem"], key["keyID"], key["kind"])
    yield daemon
    daemon.stop()
    desktop.cleanup()


def go_test(daemon, built, name, tmp_path, **env):
    """Runs one test of the binary against `daemon`; records every token it saw."""
    secrets = tmp_path / f"{name}.secrets"
    environment = dict(daemon.env, MSSO_E2E_MSSO=str(BIN / "msso"), MSSO_E2E_SECRETS=str(secrets),
                       MSSO_E2E_PASSWORD=PASSWORDS["alice"], **env)
    done = subprocess.run([built.tests, "-test.run", f"^{name}$", "-test.v", "-test.count=1"], env=environment,
                          capture_output=True, text=True, timeout=120)
    if secrets.exists():
        SECRETS.update(line for line in secrets.read_text().splitlines() if line)
    assert done.returncode == 0 and f"--- PASS: {name}" in done.stdout, done.stdout + done.stderr
    return done


def logged_in(daemon, group):
    done = daemon.login(group=group)
    assert done.returncode == 0, done.stderr


# -- the module ------------------------------------------------------------------------------------

def test_the_module_is_standard_library_only_vets_clean_and_passes_its_unit_tests():
    assert go("list", "-m", "all").split() == ["msso"], "no dependency: a module of its own, nothing to download"
    assert "require" not in (MODULE / "go.mod").read_text()
    formatted = subprocess.run(["gofmt", "-l", "."], cwd=MODULE, capture_output=True, text=True)
    assert formatted.returncode == 0 and formatted.stdout == "", f"not gofmt'ed: {formatted.stdout}"
    go("vet", "./...")
    go("vet", "-tags", "e2e", "./...")
    # The unit tests (no daemon) include the error names and exit statuses against the definition.
    out = go("test", "-count=1", "-v", "./...")
    for name in ("TestErrorNamesAndExitStatusesAreTheDefinition", "TestRepliesAreMatchedToCallsBySerial",
                 "TestTokensAndHeadersNeverPrintTheirSecret", "TestARegistryIsNamedAsTheURLItsTokenGoesTo",
                 "TestGetAnswersTheTokenAsTheAuthorizationHeaderUntilItExpires", "TestARegistryIsNamedAsItsIndexURL"):
        assert f"--- PASS: {name}" in out, out


# -- a hostile broker -------------------------------------------------------------------------------

def test_a_hostile_broker_gets_the_librarys_own_error_and_bounded_memory(built):
    """Every case of hostile_replies.py (the list the Python and C libraries' tests use too), each
    on a socket of its own served from here, through TestHostileReplies (e2e_test.go): the outcome
    is `ok` or an *msso.Error naming the cause, never another error or a panic; the client serves a
    ping after it; signals nobody subscribed to are dropped and a subscription's queue stops at
    its bound; the test binary's peak resident memory over each case stays within
    hostile_replies.MEMORY_BOUND."""
    directory = Path(tempfile.mkdtemp(prefix="msso-hostile-"))  # short: a socket's path has 107 bytes at most
    brokers = HostileBrokers(directory)
    try:
        cases = [{"name": name, "socket": brokers.path(name), "verb": case.verb, "timeoutMs": int(case.timeout * 1000),
                  "subscribed": case.subscribed, "events": case.events is not None}
                 for name, case in hostile_replies.CASES.items()]
        (directory / "cases.json").write_text(json.dumps(cases))
        done = subprocess.run([built.tests, "-test.run", "^TestHostileReplies$", "-test.v", "-test.count=1"],
                              env=dict(os.environ, MSSO_E2E_HOSTILE=str(directory / "cases.json"),
                                       MSSO_E2E_HOSTILE_OUT=str(directory / "outcomes.json")),
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        outcomes = json.loads((directory / "outcomes.json").read_text())
    finally:
        brokers.close()
        shutil.rmtree(directory, ignore_errors=True)
    failures = []
    for name in hostile_replies.CASES:
        try:
            hostile_replies.check(name, outcomes[name])
        except AssertionError as failure:
            failures.append(str(failure))
    assert not failures, "\n".join(failures)


# -- the verbs, through the test binary --------------------------------------------------------------

def test_hello_says_how_the_daemon_sees_the_go_program(broker, built, tmp_path):
    go_test(broker, built, "TestHelloSaysHowTheDaemonSeesThisProgram", tmp_path)


def test_every_verb_and_its_errors(broker, built, tmp_path):
    go_test(broker, built, "TestEveryVerb", tmp_path)
    assert broker.status_json()["state"] == "notLoggedIn", "the CLI sees the library's logout"


def test_signals_arrive_on_a_channel(broker, built, tmp_path):
    go_test(broker, built, "TestSignalsArriveAsTheCommandLogsInAndOut", tmp_path)


def test_one_client_shared_by_goroutines(broker, built, tmp_path):
    go_test(broker, built, "TestOneClientSharedByGoroutines", tmp_path)


def test_device_logins_join_and_are_approved_once(broker, built, idp, tmp_path):
    # The group's account is alice's (a login that may set it, the group's first, is never joined).
    assert broker.login().returncode == 0
    go_test(broker, built, "TestDeviceLoginsShowTheCodeAndWaitForApproval", tmp_path,
            MSSO_E2E_APPROVE=f"{ROOT / 'scripts' / 'idp'} approve-device {idp.dir}")
    assert broker.status_json()["state"] == "valid"


def test_lock_refuses_every_sign_until_unlock(broker, built, tmp_path):
    go_test(broker, built, "TestLockRefusesEverySignUntilUnlock", tmp_path)


# -- the signing profiles, through msso.Transport and net/http -----------------------------------------

def test_bearer_through_the_transport_within_the_groups_resources(profiles, api, built, tmp_path):
    refused = dict(api.refusals)
    go_test(profiles, built, "TestBearerThroughTheTransportWithinTheGroupsResources", tmp_path, MSSO_E2E_API=api.url)
    assert api.refusals == refused, "no request was refused"


def test_dpop_with_the_servers_nonce_through_the_transport(profiles, api, built, tmp_path):
    before = api.refusals.get("nonce", 0)
    go_test(profiles, built, "TestDPoPWithTheServersNonceThroughTheTransport", tmp_path, MSSO_E2E_API=api.url)
    assert api.refusals.get("nonce", 0) == before + 1, api.refusals
    assert set(api.refusals) <= {"nonce", "no token"}, api.refusals


def test_http_signature_covers_the_body(profiles, api, built, tmp_path):
    go_test(profiles, built, "TestHTTPSignatureCoversTheBody", tmp_path, MSSO_E2E_API=api.url)
    assert any(reason.startswith("signature") and "digest" in reason.lower() for reason in api.refusals), api.refusals


def test_the_example_runs_and_only_the_registered_executable_signs(profiles, api, built, tmp_path):
    """The same bytes at another path are another program to mssod: refused until registered."""
    logged_in(profiles, GROUP)
    url = f"{api.url}/items"
    done = subprocess.run([built.example, "-group", GROUP, url], env=profiles.env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"user": "alice", "path": "/items"}
    copy = tmp_path / "transport"
    shutil.copy2(built.example, copy)
    done = subprocess.run([copy, "-group", GROUP, url], env=profiles.env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 7 and str(copy) in done.stderr and "msso apps allow" in done.stderr, done.stderr
    assert profiles.msso("logout", "--group", GROUP).returncode == 0
    done = subprocess.run([built.example, "-group", GROUP, url], env=profiles.env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "msso login" in done.stderr, "exits as the CLI would: not logged in"


# -- docker-credential-msso ------------------------------------------------------------------------

def helper(profiles, built, action, stdin="", **env):
    return subprocess.run([built.helper, action], input=stdin, env=dict(profiles.env, **env), capture_output=True, text=True,
                          timeout=30)


def test_the_helper_answers_for_the_groups_registries_only(profiles, registry, built):
    logged_in(profiles, GROUP)
    host = f"127.0.0.1:{registry.port}"
    done = helper(profiles, built, "get", host + "\n")
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    SECRETS.add(answer["Secret"])
    assert answer["ServerURL"] == host and answer["Username"] == "oauth2" and answer["Secret"]
    assert json.loads(helper(profiles, built, "get", host, MSSO_DOCKER_USERNAME="alice").stdout)["Username"] == "alice"
    SECRETS.add(json.loads(helper(profiles, built, "get", host).stdout)["Secret"])

    # A registry outside the group's resources: Docker's "not found", and the tool goes on without.
    for elsewhere in ("registry.example.com", "127.0.0.1:9", "https://index.docker.io/v1/"):
        done = helper(profiles, built, "get", elsewhere)
        assert (done.returncode, done.stdout.strip()) == (1, NOT_FOUND), elsewhere
    # A group it is not registered for: the daemon's sentence, and the CLI's exit status.
    done = helper(profiles, built, "get", host, MSSO_GROUP=DPOP)
    assert done.returncode == 7 and DPOP in done.stdout, done.stdout
    assert helper(profiles, built, "list").stdout.strip() == "{}"
    assert helper(profiles, built, "store", '{"ServerURL": "x", "Username": "u", "Secret": "s"}').returncode == 0
    assert helper(profiles, built, "erase", host).returncode == 0
    assert helper(profiles, built, "frobnicate").returncode == 64


def skopeo_inspect(profiles, registry, built, tmp_path):
    authfile = tmp_path / "auth.json"
    authfile.write_text(json.dumps({"credHelpers": {f"127.0.0.1:{registry.port}": "msso"}}))
    env = dict(profiles.env, PATH=f"{built.dir}:{os.environ['PATH']}")
    return subprocess.run(["skopeo", "inspect", "--authfile", authfile, "--tls-verify=false",
                           f"docker://127.0.0.1:{registry.port}/{REPOSITORY}:{TAG}"],
                          env=env, capture_output=True, text=True, timeout=60)


def test_skopeo_pulls_metadata_with_the_helper_while_logged_in_and_not_after_logout(profiles, registry, built, tmp_path):
    logged_in(profiles, GROUP)
    seen, users = len(registry.seen), len(registry.users)
    done = skopeo_inspect(profiles, registry, built, tmp_path)
    assert done.returncode == 0, done.stderr
    image = json.loads(done.stdout)
    assert image["Digest"] == digest(registry.manifest) and image["Labels"] == {"org.example.probe": "msso"}
    assert image["RepoTags"] == [TAG]
    tokens = set(registry.seen[seen:])
    assert tokens and set(registry.users[users:]) == {"oauth2"}, "skopeo sent the helper's answer"
    SECRETS.update(tokens)

    assert profiles.msso("logout", "--group", GROUP).returncode == 0
    refused = registry.refused
    done = skopeo_inspect(profiles, registry, built, tmp_path)
    assert done.returncode != 0 and "msso login" in done.stderr, done.stderr
    # The token skopeo was given is refused by the registry now (revoked at the IdP).
    for token in tokens:
        basic = base64.b64encode(f"oauth2:{token}".encode()).decode()
        answer = requests.get(f"{registry.url}/v2/", headers={"Authorization": f"Basic {basic}"}, timeout=10,
                              verify=registry.certificate)
        assert answer.status_code == 401
    assert registry.refused > refused


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI (scripts/setup installs skopeo, not Docker)")
def test_the_docker_cli_reads_a_manifest_through_the_helper(profiles, registry, built, tmp_path):
    """`docker manifest inspect` talks to the registry itself (no dockerd), with the credentials
    config.json's credHelpers name."""
    logged_in(profiles, GROUP)
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {f"127.0.0.1:{registry.port}": "msso"}}))
    env = dict(profiles.env, PATH=f"{built.dir}:{os.environ['PATH']}", DOCKER_CONFIG=str(tmp_path))
    seen = len(registry.seen)
    done = subprocess.run(["docker", "manifest", "inspect", "--insecure", f"127.0.0.1:{registry.port}/{REPOSITORY}:{TAG}"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["config"]["digest"] in registry.blobs
    assert registry.seen[seen:], "docker sent the helper's token"
    SECRETS.update(registry.seen[seen:])
    assert profiles.msso("logout", "--group", GROUP).returncode == 0
    refused = registry.refused
    done = subprocess.run(["docker", "manifest", "inspect", "--insecure", f"127.0.0.1:{registry.port}/{REPOSITORY}:{TAG}"],
                          env=env, capture_output=True, text=True, timeout=60)
    # (docker drops the helper's sentence and goes on without credentials: the registry refuses.)
    assert done.returncode != 0 and "no basic auth credentials" in done.stderr, done.stderr
    assert registry.refused > refused


def test_a_socket_another_user_planted_is_refused(built):
    """Attack: eve listens where the user's MSSO_SOCKET points. Expected: the library asks the
    kernel who listens (SO_PEERCRED) before it sends a byte and refuses another uid's broker,
    naming it (the Docker helper, on the library, as tester); eve receives nothing."""
    planted = PlantedSocket()
    try:
        helper = planted.dir / "docker-credential-msso"
        shutil.copy(built.helper, helper)
        helper.chmod(0o755)
        done = subprocess.run([*as_uid(1001), helper, "get"], input="https://registry.example\n", capture_output=True,
                              text=True, timeout=30, env={"PATH": "/usr/bin:/bin", "MSSO_SOCKET": str(planted.path)})
        assert done.returncode != 0, done.stdout
        assert "runs as another user (uid 1002)" in done.stderr + done.stdout, (done.stdout, done.stderr)
        assert planted.received() == b"", "eve received nothing"
    finally:
        planted.close()
