"""cargo's credential provider, clients/go/cmd/cargo-credential-msso, against the real parts: the real
cargo (1.74 or later, which has credential providers) fetching a dependency from a private sparse
registry on 127.0.0.1 (cargo_registry_server.py: https, `"auth-required": true`, and only tokens the
IdP says are active), the real daemon, keyring and IdP.

The provider is built here with Debian's Go, offline, and registered for the group by its path, as
an administrator would register the installed one; cargo runs it from a throwaway CARGO_HOME whose
config.toml names it for the registry. Nothing here goes further than 127.0.0.1: the only
dependency is the private registry's crate.
"""
import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests

from cargo_registry_server import CRATE, VERSION, CargoRegistryServer, index_path
from harness import GROUP, ROOT, SECRETS, Broker, Desktop

MODULE = ROOT / "clients" / "go"
GO_ENV = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=readonly", GO111MODULE="on")
REGISTRY = "msso-test"  # the registry's name in cargo's configuration
HELLO = {"v": [1]}


def version_of(cargo) -> tuple[int, int] | None:
    try:
        out = subprocess.run([cargo, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return None
    match = re.match(r"cargo (\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2])) if match else None


def find_cargo():
    """A cargo with credential providers (1.74 or later), as the binary itself: Debian's
    `cargo-web` (1.85 and later, /usr/bin/cargo; scripts/setup installs it: Debian 12's `cargo`
    is 0.66, too old), else rustup's (a rustup proxy, ~/.cargo/bin/cargo, would look for its
    toolchains in the test desktop's HOME, so it is asked which cargo it runs)."""
    candidates = [os.environ.get("CARGO"), "/usr/bin/cargo"]
    for rustup in (shutil.which("rustup"), Path.home() / ".cargo" / "bin" / "rustup"):
        if rustup and Path(rustup).exists():
            which = subprocess.run([rustup, "which", "cargo"], capture_output=True, text=True, timeout=60)
            candidates.append(which.stdout.strip() if which.returncode == 0 else None)
    candidates.append(shutil.which("cargo"))
    for candidate in filter(None, candidates):
        version = version_of(candidate)
        if version and version >= (1, 74):
            return Path(candidate).resolve(), version
    return None, None


CARGO, CARGO_VERSION = find_cargo()
pytestmark = pytest.mark.skipif(CARGO is None, reason="no cargo 1.74 or later (credential providers came in 1.74; "
                                                      "Debian 12's cargo is 0.66): run scripts/setup (Debian's cargo-web), or set $CARGO")


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    out = tmp_path_factory.mktemp("go")
    done = subprocess.run(["go", "build", "-o", out / "cargo-credential-msso", "./cmd/cargo-credential-msso"],
                          cwd=MODULE, env=GO_ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "cargo-credential-msso"


@pytest.fixture(scope="module")
def registry(idp):
    server = CargoRegistryServer(idp)
    yield server
    SECRETS.update(server.seen)
    server.close()


@pytest.fixture(scope="module")
def broker(idp, registry, provider):
    """One group whose tokens are for the registry only; the provider registered for it."""
    desktop = Desktop()
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": [f"{registry.url}/"]}}, start=False)
    daemon.register("cargo-provider", [provider], [GROUP])
    daemon.start()
    yield daemon
    daemon.stop()
    desktop.cleanup()


def logged_in(daemon):
    done = daemon.login()
    assert done.returncode == 0, done.stderr


def logged_out(daemon):
    assert daemon.msso("logout", "--group", GROUP).returncode == 0
    assert daemon.status_json()["state"] == "notLoggedIn"


def current_token(daemon, registry):
    """The group's token for the registry as msso hands it out (the broker caches it: the one the
    provider gets too, until it is refreshed)."""
    done = daemon.msso("token", "--group", GROUP, "--resource", registry.index, "--format", "json")
    assert done.returncode == 0, done.stderr
    token = json.loads(done.stdout)
    SECRETS.add(token["accessToken"])
    return token


# -- the protocol, spoken to the provider directly --------------------------------------------------

def converse(daemon, executable, *requests_):
    """Runs the provider as cargo does (--cargo-plugin, one JSON request a line on standard input);
    returns its hello, its answers, and what it wrote on standard error."""
    lines = "".join(json.dumps(request) + "\n" for request in requests_)
    done = subprocess.run([executable, "--cargo-plugin"], input=lines, env=daemon.env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    hello, *answers = [json.loads(line) for line in done.stdout.splitlines()]
    for answer in answers:
        if "Ok" in answer and "token" in answer["Ok"]:
            SECRETS.add(answer["Ok"]["token"].removeprefix("Bearer "))
    return hello, answers, done.stderr


def request(kind, index, **more):
    return {"v": 1, "kind": kind, "registry": {"index-url": index, "name": REGISTRY}, "args": ["--group", GROUP], **more}


def test_the_provider_speaks_cargos_protocol_against_the_broker(broker, registry, provider, tmp_path):
    index = f"sparse+{registry.index}"
    logged_out(broker)
    hello, answers, stderr = converse(broker, provider, request("get", index, operation="read"),
                                      request("login", index, token="a-pasted-token"), request("logout", index))
    assert hello == HELLO
    # Not logged in: "not-found" (so that cargo login goes on to log in), the daemon's sentence also
    # on standard error, which cargo passes through (it shows only an "other" failure's message).
    assert answers[0]["Err"]["kind"] == "not-found"
    assert f"msso login --group {GROUP}" in answers[0]["Err"]["message"] and f"msso login --group {GROUP}" in stderr
    assert f"cargo login --registry {REGISTRY}" in answers[0]["Err"]["message"]
    assert answers[1]["Err"]["kind"] == "operation-not-supported" and "takes no token" in answers[1]["Err"]["message"]
    assert answers[2]["Err"]["kind"] == "operation-not-supported"
    assert f"`msso logout --group {GROUP}`" in answers[2]["Err"]["message"] and f"msso logout --group {GROUP}" in stderr
    assert broker.status_json()["state"] == "notLoggedIn", "a logout request leaves the session alone"

    logged_in(broker)
    expected = current_token(broker, registry)
    publish = request("get", index, operation="publish", name=CRATE, vers=VERSION, cksum="0" * 64)
    elsewhere = request("get", "sparse+https://127.0.0.1:9/index/", operation="read")
    _, answers, stderr = converse(broker, provider, request("get", index, operation="read"), publish, elsewhere,
                                  request("get", "ssh://git@127.0.0.1:9/index", operation="read"))
    # The token as the Authorization header's value, cached by cargo (in memory) until it expires.
    ok = {"kind": "get", "token": f"Bearer {expected['accessToken']}", "cache": "expires",
          "expiration": int(expected["expiresAt"]), "operation_independent": True}
    assert answers[0] == {"Ok": ok} and answers[1] == {"Ok": ok}
    # Outside the group's resources, or not http(s): another provider's (cargo tries its next one).
    assert answers[2]["Err"]["kind"] == "url-not-supported" and registry.url in answers[2]["Err"]["message"]
    assert answers[3]["Err"]["kind"] == "url-not-supported"
    assert expected["accessToken"] not in stderr

    # Logged in already: cargo login has nothing to do.
    _, answers, stderr = converse(broker, provider, request("login", index))
    assert answers == [{"Ok": {"kind": "login"}}] and "Already logged in" in stderr
    # A copy at another path is another program to mssod: "other", with how to register it.
    copy = tmp_path / "cargo-credential-msso"
    shutil.copy2(provider, copy)
    _, answers, _ = converse(broker, copy, request("get", index, operation="read"))
    assert answers[0]["Err"]["kind"] == "other" and "msso apps allow" in answers[0]["Err"]["message"], answers


# -- the real cargo -----------------------------------------------------------------------------------

@pytest.fixture
def project(registry, provider, tmp_path):
    """A CARGO_HOME whose config names the registry and the provider, and a crate depending on the
    registry's crate."""
    home, crate = tmp_path / "cargo-home", tmp_path / "app"
    home.mkdir()
    (home / "config.toml").write_text(f"""
[registries.{REGISTRY}]
index = "sparse+{registry.index}"
credential-provider = ["{provider}", "--group", "{GROUP}"]

[http]
cainfo = "{registry.certificate}"

[net]
offline = false
""")
    (crate / "src").mkdir(parents=True)
    (crate / "src" / "main.rs").write_text(f"fn main() {{\n    println!(\"{{}}\", {CRATE.replace('-', '_')}::probe());\n}}\n")
    (crate / "Cargo.toml").write_text(f"""[package]
name = "app"
version = "0.1.0"
edition = "2021"

[dependencies]
{CRATE} = {{ version = "1", registry = "{REGISTRY}" }}
""")
    return SimpleNamespace(home=home, crate=crate)


def cargo(broker, project, *argv, timeout=120):
    env = dict(broker.env, CARGO_HOME=str(project.home), PATH=f"{CARGO.parent}:{broker.env['PATH']}", CARGO_TERM_COLOR="never")
    return subprocess.run([CARGO, *argv], cwd=project.crate, env=env, capture_output=True, text=True, timeout=timeout)


def provider_calls(broker) -> int:
    """How many tokens the daemon handed out so far (its debug log has a line per call)."""
    return broker.logged("method=token outcome=ok")


def files_holding(directory: Path, secret: str) -> list[Path]:
    return [path for path in directory.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]


def test_cargo_fetches_from_the_private_registry_with_the_groups_token_and_never_writes_it(broker, registry, project):
    logged_in(broker)
    token = current_token(broker, registry)["accessToken"]
    served, authorizations, calls = len(registry.served), len(registry.authorizations), provider_calls(broker)
    done = cargo(broker, project, "generate-lockfile")
    assert done.returncode == 0, done.stderr
    done = cargo(broker, project, "fetch")
    assert done.returncode == 0, done.stderr
    assert f"Downloaded {CRATE} v{VERSION}" in done.stderr, done.stderr

    # The registry served the index and the crate to cargo, which sent the group's token every time.
    assert registry.served[served:] == ["/index/config.json", f"/index/{index_path(CRATE)}", f"/dl/{CRATE}/{VERSION}/download"]
    assert set(registry.authorizations[authorizations:]) == {f"Bearer {token}"}
    [cached] = project.home.glob(f"registry/cache/*/{CRATE}-{VERSION}.crate")
    assert cached.read_bytes() == registry.crate
    lock = (project.crate / "Cargo.lock").read_text()
    assert f'name = "{CRATE}"' in lock and f"sparse+{registry.index}" in lock
    # cargo asked the provider once per run ("cache": "expires": kept in its memory for the run).
    assert provider_calls(broker) - calls == 2

    # Nothing of the token on disk: not in CARGO_HOME (no credentials.toml), not in the project.
    assert not (project.home / "credentials.toml").exists() and not (project.home / "credentials").exists()
    assert files_holding(project.home, token) == [] and files_holding(project.crate, token) == []


def test_logged_out_cargo_fails_and_says_to_run_msso_login(broker, registry, project):
    logged_out(broker)
    served, refused = len(registry.served), registry.refused
    done = cargo(broker, project, "generate-lockfile")
    assert done.returncode != 0
    assert f"run `msso login --group {GROUP}`" in done.stderr and f"cargo login --registry {REGISTRY}" in done.stderr, done.stderr
    assert registry.served[served:] == [] and registry.refused > refused


def test_after_msso_logout_a_fetch_that_worked_fails_and_its_token_is_refused(broker, registry, project):
    logged_in(broker)
    seen = len(registry.seen)
    done = cargo(broker, project, "generate-lockfile")
    assert done.returncode == 0, done.stderr
    tokens = set(registry.seen[seen:])
    assert tokens
    logged_out(broker)
    # The same CARGO_HOME, whose index cache cargo now refreshes: no token of the run before is left.
    done = cargo(broker, project, "generate-lockfile")
    assert done.returncode != 0 and f"msso login --group {GROUP}" in done.stderr, done.stderr
    assert "Locking" not in done.stderr
    # The token cargo had is refused by the registry now (revoked at the IdP by the logout).
    for token in tokens:
        answer = requests.get(f"{registry.index}config.json", headers={"Authorization": f"Bearer {token}"}, timeout=10,
                              verify=registry.certificate)
        assert answer.status_code == 401


def test_cargo_login_logs_the_group_in_with_a_device_code_and_cargo_logout_names_msso_logout(broker, registry, project, idp):
    logged_out(broker)
    env = dict(broker.env, CARGO_HOME=str(project.home), PATH=f"{CARGO.parent}:{broker.env['PATH']}", CARGO_TERM_COLOR="never")
    # `-- --device`: arguments for the provider, after the configuration's.
    login = subprocess.Popen([CARGO, "login", "--registry", REGISTRY, "--", "--device"], cwd=project.crate, env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, login.kill)
    watchdog.start()
    try:
        said = []
        for line in login.stderr:  # the provider's prompt, on the standard error cargo passes through
            said.append(line)
            code = re.search(r"enter the code (\S+)", line)
            if code:
                idp.approve_device(code[1])
        assert login.wait() == 0, "".join(said)
    finally:
        watchdog.cancel()
    assert any(f"Logged in to {GROUP}" in line for line in said), said
    assert broker.status_json()["state"] == "valid"
    done = cargo(broker, project, "generate-lockfile")
    assert done.returncode == 0, done.stderr

    # cargo logout: not the provider's to do (the session is every app's of the group).
    done = cargo(broker, project, "logout", "--registry", REGISTRY)
    assert done.returncode != 0 and f"msso logout --group {GROUP}" in done.stderr, done.stderr
    assert broker.status_json()["state"] == "valid"
