"""Tokens per server (`tokens = "per-resource"`) through every other client: the Go, C and Swift
libraries, docker's and cargo's credential helpers, `msso exec`, and the DPoP and RFC 9421 profiles.
Each gets, for a URL under one entry of `resources`, the token minted for that entry alone: the
one a real resource server (token_server.py) accepts under that entry's prefix and refuses (401,
"the token is for another server") under the other's. Against the real glewlwyd with RFC 8707
resource indicators, as test_per_resource.py, whose fixtures (`servers`: one TLS server with git's
entry under /git/ and the API's at its origin; `per_resource`: mssod logged in for both) these
reuse; the Swift app gets the same over plain http (its URLSession cannot be told to trust the
test server's certificate), the helpers a container and a cargo registry as entries of their own."""
import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests

from harness import BIN, GROUP, SECRETS, Broker, Desktop, IdP
from test_per_resource import bearer, per_resource, servers  # noqa: F401 (fixtures)
from test_tools import repos  # noqa: F401 (the fixture `servers` takes)
from token_server import TokenServer

MODULE = Path(__file__).resolve().parents[2] / "clients" / "go"
GO_ENV = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=readonly", GO111MODULE="on")


def probes(git, api):
    """A URL under each entry, and what the server answers there to its own token: the repository's
    HEAD (git http-backend) under git's, a JSON echo of the token's user under the API's."""
    return {git: (f"{git}suite.git/HEAD", "ref: refs/heads/main"), api: (f"{api}items", '"user": "alice"')}


def presented(served, url, token):
    return requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10,
                        verify=str(served.certificate) if served.certificate else True)


def each_good_only_for_its_entry(served, idp, tokens):
    """`tokens`: entry -> the token a client got for a URL under it. They differ, each names its
    entry as its audience at the IdP, and the server takes each under its entry's prefix alone."""
    assert len(set(tokens.values())) == len(tokens) == 2, "a token of its own per entry"
    SECRETS.update(tokens.values())
    urls = probes(*tokens)
    for entry, token in tokens.items():
        assert idp.introspect(token)["aud"] == entry
        url, answer = urls[entry]
        [(elsewhere, _)] = [probe for other, probe in urls.items() if other != entry]
        accepted = presented(served, url, token)
        assert accepted.status_code == 200 and answer in accepted.text, (url, accepted.status_code, accepted.text)
        refusals = served.wrong_audience
        refused = presented(served, elsewhere, token)
        assert refused.status_code == 401 and served.wrong_audience == refusals + 1, (elsewhere, refused.status_code, refused.text)
        assert refused.json()["error"] == "the token is for another server"


def broker_for(desktop, servers, programs=(), **group):  # noqa: F811
    """As test_per_resource's `per_resource`, with `programs` registered for the group before mssod
    starts (a compiled program is known by its path) and the group's other settings."""
    served, idp, git, api = servers
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": [api, git], "tokens": "per-resource", **group}}, start=False)
    if programs:
        daemon.register("clients", list(programs), [GROUP])
    daemon.start()
    login = daemon.device_login(idp)
    assert login.returncode == 0, login.stderr
    return daemon


def minted(daemon) -> int:
    return daemon.logged("minted an access token")


# -- the Go library ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def go_programs(tmp_path_factory):
    """clients/go's example (a request through msso.Transport and net/http) and the two credential
    helpers, built from the sources as they are (Debian's Go, offline)."""
    out = tmp_path_factory.mktemp("go")
    done = subprocess.run(["go", "build", "-o", str(out), "./examples/transport", "./cmd/docker-credential-msso",
                           "./cmd/cargo-credential-msso"], cwd=MODULE, env=GO_ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return SimpleNamespace(dir=out, transport=out / "transport", docker=out / "docker-credential-msso",
                           cargo=out / "cargo-credential-msso")


def test_the_go_library_signs_each_request_with_its_servers_token(desktop, servers, go_programs):  # noqa: F811
    """A Go program's requests through msso.Transport: each reaches its server (200), signed with the
    token of the entry its URL falls in; the token the server saw under one entry is refused under
    the other."""
    served, idp, git, api = servers
    daemon = broker_for(desktop, servers, [go_programs.transport])
    try:
        tokens = {}
        for entry, (url, answer) in probes(git, api).items():
            seen = len(served.seen)
            done = subprocess.run([go_programs.transport, url], env=dict(daemon.env, SSL_CERT_FILE=str(served.certificate)),
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and answer in done.stdout, (url, done.stdout, done.stderr)
            [tokens[entry]] = set(served.seen[seen:])
        each_good_only_for_its_entry(served, idp, tokens)
        assert minted(daemon) == 2
    finally:
        daemon.stop()


# -- the C library -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def c_driver():
    """libmsso and its test driver (one msso_client fed commands), built as test_c_library.py does."""
    from test_c_library import DRIVER, LIBRARY
    done = subprocess.run(["make", "-s", "-C", LIBRARY, "tests"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return DRIVER


def test_the_c_library_signs_and_hands_out_each_servers_token(desktop, servers, c_driver):  # noqa: F811
    """libmsso's msso_sign for a URL under each entry: two tokens, each taken only under its own
    entry's prefix; msso_token for a resource under an entry is that entry's token."""
    from test_c_library import Driver
    from test_c_library import bearer as c_bearer
    served, idp, git, api = servers
    daemon = broker_for(desktop, servers, [c_driver])
    driver = Driver(daemon.env)
    try:
        tokens = {entry: c_bearer(driver("sign", "GET", url)).removeprefix("Bearer ") for entry, (url, _) in probes(git, api).items()}
        each_good_only_for_its_entry(served, idp, tokens)
        token = driver("token", f"resource={git}suite.git")
        assert token["ok"] and token["accessToken"] == tokens[git], token
        assert minted(daemon) == 2
    finally:
        driver.close()
        daemon.stop()


# -- the Swift library ---------------------------------------------------------------------------------

@pytest.fixture
def plain_servers(repos):  # noqa: F811
    """As `servers`, over plain http (loopback: an entry may be http there). The Swift app's
    URLSession (swift-corelibs-foundation, on libcurl) trusts only the system's certificate
    authorities: neither SSL_CERT_FILE nor anything else points it at the test server's own."""
    served = TokenServer(None, repos)
    git, api = f"{served.url}/git/", f"{served.url}/"
    idp = IdP(resources=[api, git], refresh_one_use="never")
    served.idp = idp
    served.audiences = {"/git/": git, "/": api}
    yield served, idp, git, api
    served.close()
    idp.cleanup()


def test_a_swift_app_signs_each_request_with_its_servers_token(desktop, plain_servers):
    """App1, the demo's app (SuiteKit: MSSOClient and MSSOClientFoundation's signed URLSession), as
    built: its requests under each entry reach the server with that entry's token, which the other
    entry's prefix refuses."""
    served, idp, git, api = plain_servers
    daemon = broker_for(desktop, plain_servers)  # App1 is among the clients every Broker registers
    try:
        tokens = {}
        for entry, (url, answer) in probes(git, api).items():
            seen = len(served.seen)
            # (A refusal would not fail fast: URLSession of Swift 6.3.1 and earlier never ends a task that
            # a 401 with a Basic challenge answers, swift-corelibs-foundation#5456; fixed in 6.3.2.)
            done = subprocess.run([BIN / "App1", "fetch", url], env=daemon.env, capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, (url, done.stdout, done.stderr)
            assert "-> 200 " in done.stdout and answer in done.stdout, done.stdout  # "[App1] GET PATH -> 200 BODY"
            [tokens[entry]] = set(served.seen[seen:])
        each_good_only_for_its_entry(served, idp, tokens)
        assert minted(daemon) == 2
    finally:
        daemon.stop()


# -- docker's and cargo's credential helpers -------------------------------------------------------------

@pytest.fixture(scope="module")
def registries(go_programs):
    """A container registry, a cargo registry and one more server (which takes under its origin only
    a token for its own entry), each an entry of one per-resource group, logged in; the two
    helpers registered for it. The registries take any token the IdP says is active, as a registry
    in front of an OAuth resource server does: what each got is read at the IdP."""
    from cargo_registry_server import CargoRegistryServer
    from registry_server import RegistryServer
    docker, cargo, other = RegistryServer(None), CargoRegistryServer(None), TokenServer(None, None, tls=True)
    entries = SimpleNamespace(docker=f"{docker.url}/", cargo=f"{cargo.url}/", other=f"{other.url}/")
    idp, desktop, daemon = None, None, None
    try:
        idp = IdP(resources=[entries.docker, entries.cargo, entries.other], refresh_one_use="never")
        desktop = Desktop()
        for server in (docker, cargo, other):
            server.idp = idp
        other.audiences = {"/": entries.other}
        daemon = Broker(desktop, idp, groups={GROUP: {"resources": [entries.docker, entries.cargo, entries.other],
                                                      "tokens": "per-resource"}}, start=False)
        daemon.register("helpers", [go_programs.docker, go_programs.cargo], [GROUP])
        daemon.start()
        login = daemon.device_login(idp)
        assert login.returncode == 0, login.stderr
        yield SimpleNamespace(daemon=daemon, idp=idp, docker=docker, cargo=cargo, other=other, entries=entries)
    finally:
        if daemon:
            daemon.stop()
        for server in (docker, cargo, other):
            SECRETS.update(server.seen)
            server.close()
        if desktop:
            desktop.cleanup()
        if idp:
            idp.cleanup()


def only_for(registries, token, entry):
    """The token names `entry` as its audience, and the other server refuses it (while it takes its
    own entry's token)."""
    SECRETS.add(token)
    assert registries.idp.introspect(token)["aud"] == entry
    other, url = registries.other, f"{registries.entries.other}items"
    refusals = other.wrong_audience
    refused = presented(other, url, token)
    assert refused.status_code == 401 and other.wrong_audience == refusals + 1, (refused.status_code, refused.text)
    own = bearer(registries.daemon.msso("sign", "--url", url))
    assert own != token and presented(other, url, own).status_code == 200


def test_dockers_helper_answers_the_registrys_token_which_the_other_server_refuses(registries, go_programs, tmp_path):
    """docker-credential-msso under the real skopeo: the token it hands out for the registry is
    the registry entry's (skopeo reads the image with it), refused by the group's other server."""
    registry, daemon = registries.docker, registries.daemon
    host = f"127.0.0.1:{registry.port}"
    done = subprocess.run([go_programs.docker, "get"], input=host, env=daemon.env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    secret = json.loads(done.stdout)["Secret"]
    only_for(registries, secret, registries.entries.docker)

    from registry_server import REPOSITORY, TAG
    authfile = tmp_path / "auth.json"
    authfile.write_text(json.dumps({"credHelpers": {host: "msso"}}))
    seen = len(registry.seen)
    done = subprocess.run(["skopeo", "inspect", "--authfile", authfile, "--tls-verify=false", f"docker://{host}/{REPOSITORY}:{TAG}"],
                          env=dict(daemon.env, PATH=f"{go_programs.dir}:{os.environ['PATH']}"), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["RepoTags"] == [TAG]
    assert set(registry.seen[seen:]) == {secret}, "skopeo sent the helper's token, the registry entry's"


def test_cargos_provider_answers_the_registrys_token_which_the_other_server_refuses(registries, go_programs, tmp_path):
    """cargo-credential-msso under the real cargo: `cargo generate-lockfile` reads the private
    registry's index with the registry entry's token, which the group's other server refuses."""
    from cargo_registry_server import CRATE
    from test_cargo import CARGO, REGISTRY
    if CARGO is None:
        pytest.skip("no cargo 1.74 or later (test_cargo.py says where one comes from)")
    registry = registries.cargo
    home, crate = tmp_path / "cargo-home", tmp_path / "app"
    (crate / "src").mkdir(parents=True)
    home.mkdir()
    (home / "config.toml").write_text(f"""[registries.{REGISTRY}]
index = "sparse+{registry.index}"
credential-provider = ["{go_programs.cargo}", "--group", "{GROUP}"]

[http]
cainfo = "{registry.certificate}"
""")
    (crate / "src" / "main.rs").write_text("fn main() {}\n")
    (crate / "Cargo.toml").write_text(f'[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n'
                                      f'[dependencies]\n{CRATE} = {{ version = "1", registry = "{REGISTRY}" }}\n')
    seen = len(registry.seen)
    done = subprocess.run([CARGO, "generate-lockfile"], cwd=crate, capture_output=True, text=True, timeout=120,
                          env=dict(registries.daemon.env, CARGO_HOME=str(home), PATH=f"{CARGO.parent}:{os.environ['PATH']}",
                                   CARGO_TERM_COLOR="never"))
    assert done.returncode == 0, done.stderr
    assert f'name = "{CRATE}"' in (crate / "Cargo.lock").read_text()
    [token] = set(registry.seen[seen:])
    only_for(registries, token, registries.entries.cargo)


# -- msso exec -------------------------------------------------------------------------------------------

# Run by `msso exec`: prints the token it was given, then what each server answered to it (curl
# reads the header from standard input: the token is in no process's arguments).
CALLER = """printf '%s\\n' "${VARIABLE}"
for url in "$@"; do
    printf 'header = "Authorization: Bearer %s"\\n' "${VARIABLE}" | curl -s -o /dev/null -w '%{http_code}\\n' --cacert "$CERT" -K - "$url"
done"""


def test_msso_exec_gives_the_command_the_token_for_its_resource(per_resource):  # noqa: F811
    """`msso exec --resource URL` puts in the command's environment the token of the entry URL
    falls in ($MSSO_ACCESS_TOKEN, or --env's name): the command's request to that server is
    answered 200, the same token at the other entry 401."""
    daemon, served, idp, git, api = per_resource
    urls = {entry: url for entry, (url, _) in probes(git, api).items()}
    tokens = {}
    for entry, elsewhere, variable in ((git, api, "MSSO_ACCESS_TOKEN"), (api, git, "API_TOKEN")):
        argv = ["exec", "--resource", urls[entry]] + (["--env", variable] if variable != "MSSO_ACCESS_TOKEN" else [])
        done = subprocess.run([*daemon.desktop.prefix, BIN / "msso", *argv, "--", "sh", "-c", CALLER.replace("VARIABLE", variable),
                               "caller", urls[entry], urls[elsewhere]],
                              env=dict(daemon.env, CERT=str(served.certificate)), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        token, *answers = done.stdout.split()
        SECRETS.add(token)
        assert answers == ["200", "401"], (entry, done.stdout)
        tokens[entry] = token
    assert served.wrong_audience == 2
    each_good_only_for_its_entry(served, idp, tokens)


# -- proof of possession -------------------------------------------------------------------------------

def claims(jwt):
    return json.loads(base64.urlsafe_b64decode(jwt.split(".")[1] + "=="))


def test_dpop_tokens_per_server_are_each_bound_to_the_groups_key(desktop, servers):  # noqa: F811
    """`sign = "dpop"` with a token per server: each entry's token is minted bound to the group's
    key (RFC 9449 `cnf.jkt`, the key's thumbprint) and names its entry as its audience; each
    request carries it with a fresh proof for its own URL."""
    from test_proof_of_possession import claims_of, signed_headers
    served, idp, git, api = servers
    daemon = broker_for(desktop, servers, sign="dpop")
    try:
        key = json.loads(daemon.msso("keys", "--json").stdout)
        tokens = {}
        for entry, (url, _) in probes(git, api).items():
            headers = signed_headers(daemon, "--url", url)
            scheme, token = headers["Authorization"].split(" ", 1)
            SECRETS.add(token)
            assert scheme == "DPoP", headers["Authorization"]
            assert claims(token)["cnf"]["jkt"] == key["keyID"] and claims(token)["aud"] == entry, claims(token)
            said = idp.introspect(token)  # and the IdP's own word on it
            assert said["token_type"] == "DPoP" and said["cnf"]["jkt"] == key["keyID"] and said["aud"] == entry, said
            _, proof = claims_of(headers["DPoP"], key)  # signed with the group's key, for this URL and this token
            assert proof["htu"] == url and proof["htm"] == "GET"
            assert proof["ath"] == base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()
            tokens[entry] = token
        assert tokens[git] != tokens[api] and minted(daemon) == 2
    finally:
        daemon.stop()


def test_message_signatures_per_server_cover_each_servers_token(desktop, servers):  # noqa: F811
    """`sign = "http-signature"` with a token per server: each request's RFC 9421 signature, made
    with the group's key (checked by an independent library), covers the Authorization header that
    carries its entry's token; each token is taken under its entry's prefix alone."""
    from http_message_signatures.exceptions import InvalidSignature
    from test_proof_of_possession import signed_headers, verify
    served, idp, git, api = servers
    daemon = broker_for(desktop, servers, sign="http-signature")
    try:
        signed, tokens = {}, {}
        for entry, (url, _) in probes(git, api).items():
            headers = signed_headers(daemon, "--url", url)
            token = headers["Authorization"].removeprefix("Bearer ")
            SECRETS.add(token)
            assert '"authorization"' in headers["Signature-Input"]
            verify(daemon, "GET", url, headers)
            signed[entry], tokens[entry] = headers, token
        each_good_only_for_its_entry(served, idp, tokens)
        # A signature holds for its own entry's token alone.
        with pytest.raises(InvalidSignature):
            verify(daemon, "GET", probes(git, api)[git][0], {**signed[git], "Authorization": f"Bearer {tokens[api]}"})
    finally:
        daemon.stop()
