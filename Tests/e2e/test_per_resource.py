"""Tokens good only where they are sent (`tokens = "per-resource"`): one login, and for each entry
of the group's `resources` an access token minted for it alone, against the real glewlwyd with
RFC 8707 resource indicators (it takes `resource` on the device and code grants and sets the
token's `aud` to it) and a resource server that accepts under each prefix only a token whose
introspected audience is that prefix's."""
import json
import subprocess

import pytest

from harness import BIN, GROUP, SECRETS, Broker, IdP, wait_for
from test_tools import KUBECTL, git, git_env, kubeconfig, repos  # noqa: F401 (fixture)
from token_server import TokenServer


@pytest.fixture
def servers(repos):  # noqa: F811
    """One TLS resource server (kubectl sends credentials only over TLS) with two audiences: git
    under /git/, the rest of it (the Kubernetes API) under its origin. Its glewlwyd lists both
    as the client's resources; its refresh tokens can be used more than once."""
    served = TokenServer(None, repos, tls=True)
    git, api = f"{served.url}/git/", f"{served.url}/"
    idp = IdP(resources=[api, git], refresh_one_use="never")
    served.idp = idp
    served.audiences = {"/git/": git, "/": api}
    yield served, idp, git, api
    served.close()
    idp.cleanup()


@pytest.fixture
def per_resource(desktop, servers):
    served, idp, git, api = servers
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": [api, git], "tokens": "per-resource"}})
    assert daemon.device_login(idp).returncode == 0
    yield daemon, served, idp, git, api
    daemon.stop()


def bearer(done):
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip().removeprefix("Authorization: Bearer ")
    SECRETS.add(token)
    return token


def test_each_server_gets_a_token_minted_for_it_alone(per_resource):
    daemon, served, idp, git, api = per_resource
    for_git = bearer(daemon.msso("sign", "--url", f"{git}team/repo.git/info/refs"))
    for_api = bearer(daemon.msso("sign", "--url", f"{api}api/v1/namespaces"))
    assert for_git != for_api
    assert idp.introspect(for_git)["aud"] == git
    assert idp.introspect(for_api)["aud"] == api
    # Kept: the next sign for the same server gets the same token, without the IdP.
    assert bearer(daemon.msso("sign", "--url", f"{git}other.git")) == for_git
    assert daemon.logged("minted an access token") == 2
    # msso token names the resource too; kubectl's cluster is the origin's entry.
    token = json.loads(daemon.msso("token", "--resource", f"{api}api", "--format", "json").stdout)
    assert token["accessToken"] == for_api
    # Seen: doctor names the mechanism and the last outcome per server; audit names each row's.
    doctor = daemon.msso("doctor").stdout
    assert "by resource indicators (RFC 8707)" in doctor, doctor
    assert f"the last token for {git} was minted" in doctor and f"the last token for {api} was minted" in doctor, doctor
    audit = daemon.msso("audit").stdout
    assert audit.count(f"for {git}\n") == 2 and audit.count(f"for {api}\n") == 2, audit
    assert for_git not in doctor + audit and for_api not in doctor + audit


def test_a_token_minted_for_git_is_refused_by_the_kubernetes_api(per_resource):
    """What the issue asks: a token a tool was given for git does not open the other server."""
    daemon, served, idp, git, api = per_resource
    import requests
    for_git = bearer(daemon.msso("sign", "--url", f"{git}x.git"))
    refused = requests.get(f"{api}api/v1/namespaces", headers={"Authorization": f"Bearer {for_git}"},
                           verify=str(served.certificate), timeout=10)
    assert refused.status_code == 401 and served.wrong_audience == 1
    for_api = bearer(daemon.msso("sign", "--url", f"{api}api/v1/namespaces"))
    accepted = requests.get(f"{api}api/v1/namespaces", headers={"Authorization": f"Bearer {for_api}"},
                            verify=str(served.certificate), timeout=10)
    assert accepted.status_code == 200, accepted.text


def test_a_path_a_server_resolves_into_the_other_servers_entry_gets_neither_token(per_resource):
    """Found by an outside test: `/x/../git/…`, `/%67it/…`, `//git/…`, `/git;v=1/…` are under the
    origin's entry as written and under git's once a server resolves them (curl does, before it
    sends): msso gave the origin's token for git's server. Now refused (exit 7), naming both."""
    daemon, served, idp, git, api = per_resource
    # And a second outside test's: an encoded `?` or `#` ending a dot segment, IIS's case, trailing
    # dots and %u, the entry's path without its slash.
    for path in ["x/../git/suite.git", "%67it/suite.git", "/git/suite.git", "git;v=1/suite.git", "git/../api/v1",
                 "git/..%3F/api/v1", "x/..%23/git/suite.git", "GIT/suite.git", "git./suite.git", "git",
                 "x/%u002e%u002e/git/suite.git"]:
        refused = daemon.msso("sign", "--url", f"{api}{path}")
        assert refused.returncode == 7, (path, refused.stdout, refused.stderr)
        assert "reads it as under" in refused.stderr, refused.stderr
        assert daemon.msso("token", "--resource", f"{api}{path}").returncode == 7
    # And a third's (blind): trailing spaces and tabs, NTFS stream names, full-width dots, `..%u2215`:
    # where two entries share a server, a segment that is not plain gets neither token.
    for path in ["git%20/suite.git", "git.%20/suite.git", "git::$INDEX_ALLOCATION/suite.git", "git%09/suite.git",
                 "git/%ef%bc%8e%ef%bc%8e/api", "git/..%u2215api", "x/..%20/git/suite.git"]:
        refused = daemon.msso("sign", "--url", f"{api}{path}")
        assert refused.returncode == 7, (path, refused.stdout, refused.stderr)
        assert "plain path" in refused.stderr or "reads it as under" in refused.stderr, refused.stderr
    assert daemon.logged("minted an access token") == 0


def test_status_lists_the_minted_tokens_never_the_tokens(per_resource):
    daemon, served, idp, git, api = per_resource
    for_git = bearer(daemon.msso("sign", "--url", f"{git}x.git"))
    status = daemon.msso("status", "--json")
    assert status.returncode == 0 and for_git not in status.stdout
    group = json.loads(status.stdout)["groups"][0]
    minted = group["tokens"]
    assert [entry["resource"] for entry in minted] == [git] and minted[0]["expiresAt"] > 0
    words = daemon.msso("status")
    assert git in words.stdout and for_git not in words.stdout


def test_minted_tokens_outlive_a_restart_and_end_with_the_session(per_resource):
    daemon, served, idp, git, api = per_resource
    for_git = bearer(daemon.msso("sign", "--url", f"{git}x.git"))
    daemon.restart()
    assert bearer(daemon.msso("sign", "--url", f"{git}x.git")) == for_git, "stored with the session, not minted again"
    assert daemon.logged("minted an access token") == 1
    for_api = bearer(daemon.msso("sign", "--url", f"{api}api"))
    assert idp.introspect(for_git)["active"] and idp.introspect(for_api)["active"]
    done = daemon.msso("logout", "--json")
    assert done.returncode == 0 and json.loads(done.stdout).get("revoked") is True, done.stdout
    assert daemon.msso("sign", "--url", f"{git}x.git").returncode == 2
    # Each minted token revoked at the provider too (found by an outside test: usable an hour on).
    assert not idp.introspect(for_git)["active"] and not idp.introspect(for_api)["active"]


def test_a_logout_revokes_more_minted_tokens_than_requests_may_run_at_once(desktop):
    """Found by an outside test: a logout revokes its minted tokens all at once, and those past the
    four requests one provider may have under way were skipped ("not revoked", valid an hour on).
    Each now waits for its turn, within the revocation's bound."""
    servers = [f"http://127.0.0.1:9/r{n}/" for n in range(6)]
    idp = IdP(resources=servers, refresh_one_use="never")
    daemon = None
    try:
        daemon = Broker(desktop, idp, groups={GROUP: {"resources": servers, "tokens": "per-resource"}})
        assert daemon.device_login(idp).returncode == 0
        minted = []
        for server in servers:
            done = daemon.msso("token", f"--resource={server}x")
            assert done.returncode == 0, done.stderr
            minted.append(done.stdout.strip())
        SECRETS.update(minted)
        assert all(idp.introspect(token)["active"] for token in minted)
        done = daemon.msso("logout", "--json")
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout)
        assert said.get("revoked") is True and not said.get("notRevoked"), done.stdout
        assert not any(idp.introspect(token)["active"] for token in minted), "every minted token revoked at the provider"
    finally:
        if daemon:
            daemon.stop()
        idp.cleanup()


@pytest.mark.skipif(not KUBECTL.exists(), reason="Debian's kubectl is unpacked by scripts/setup")
def test_kubectl_and_git_each_get_their_servers_token(per_resource, tmp_path):
    daemon, served, idp, git, api = per_resource
    config = json.loads(kubeconfig(tmp_path / "kubeconfig", served).read_text())
    config["users"][0]["user"]["exec"]["provideClusterInfo"] = True
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    env = dict(daemon.env, KUBECONFIG=str(tmp_path / "kubeconfig"), HOME=str(tmp_path))
    listed = subprocess.run([KUBECTL, "get", "namespaces"], env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "msso-test" in listed.stdout and served.wrong_audience == 0
    assert idp.introspect(served.seen[-1])["aud"] == api


def test_git_gets_the_git_servers_token_through_its_credential_helper(per_resource, tmp_path):
    """Real git and git-credential-msso: the token it hands git is the one minted for the git
    entry (git sends the path when told `credential.useHttpPath`: both entries share an origin)."""
    daemon, served, idp, git_entry, api = per_resource
    daemon.register("git-helper", [BIN / "git-credential-msso"], [GROUP])
    env = dict(git_env(daemon, tmp_path / "home"), GIT_SSL_CAINFO=str(served.certificate))
    with open(tmp_path / "home" / ".gitconfig", "a") as config:
        config.write("[credential]\n\tuseHttpPath = true\n")
    wait_for(lambda: daemon.logged("app registrations reloaded") >= 2, what="mssod to read the helper's registration")
    done = git(["ls-remote", f"{git_entry}suite.git"], env)
    assert done.returncode == 0, done.stderr
    assert served.wrong_audience == 0 and served.seen
    SECRETS.update(served.seen)
    assert idp.introspect(served.seen[-1])["aud"] == git_entry


def test_git_naming_no_path_gets_neither_token_where_two_entries_share_its_server(per_resource, tmp_path):
    """Found by an outside test: git without `credential.useHttpPath` names no path, and got the `/`
    entry's token for a repository under the git entry. Refused now, naming the fix."""
    daemon, served, idp, git_entry, api = per_resource
    daemon.register("git-helper", [BIN / "git-credential-msso"], [GROUP])
    env = dict(git_env(daemon, tmp_path / "home"), GIT_SSL_CAINFO=str(served.certificate))
    wait_for(lambda: daemon.logged("app registrations reloaded") >= 2, what="mssod to read the helper's registration")
    done = git(["ls-remote", f"{git_entry}suite.git"], env)
    assert done.returncode != 0 and "credential.useHttpPath" in done.stderr, done.stderr
    assert not served.seen, "no token reached the server"
    asked = daemon.msso("token", f"--resource={api.rstrip('/')}")
    assert asked.returncode == 7 and asked.stdout == "" and "names no path" in asked.stderr, asked.stderr


def test_a_provider_that_narrows_the_session_is_named_and_the_session_kept(desktop, repos):  # noqa: F811
    """glewlwyd with one-use refresh tokens keeps in the rotated token only the resource just
    minted: the second server is refused (invalid_target). msso says so (exit 6, the resource,
    the mechanism, the provider's words) and keeps the session and the first server's token."""
    served = TokenServer(None, repos, tls=True)
    git, api = f"{served.url}/git/", f"{served.url}/"
    idp = IdP(resources=[api, git])
    served.idp = idp
    daemon = None
    try:
        daemon = Broker(desktop, idp, groups={GROUP: {"resources": [api, git], "tokens": "per-resource"}})
        assert daemon.device_login(idp).returncode == 0
        for_git = bearer(daemon.msso("sign", "--url", f"{git}x.git"))
        refused = daemon.msso("sign", "--url", f"{api}api")
        assert refused.returncode == 6, refused.stderr
        assert api in refused.stderr and "resource indicators" in refused.stderr and "invalid_target" in refused.stderr
        assert "narrowed" in refused.stderr
        assert daemon.msso("check").returncode == 0, "the session is kept"
        assert bearer(daemon.msso("sign", "--url", f"{git}x.git")) == for_git
    finally:
        if daemon:
            daemon.stop()
        served.close()
        idp.cleanup()


def test_per_resource_without_resources_is_a_configuration_error(desktop, idp):
    daemon = Broker(desktop, idp, groups={GROUP: {"tokens": "per-resource"}}, start=False)
    done = subprocess.run([*desktop.prefix, BIN / "mssod"], env=daemon.env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    assert "tokens" in done.stderr and "`resources`" in done.stderr, done.stderr


@pytest.mark.parametrize("entries", [["https://h.example/", "https://h.example//admin/"], ["https://h.example/", "https://h.example/%61dmin/"],
                                     ["https://[::1]/", "https://[0:0::1]/admin/"]], ids=["empty-segment", "encoded", "ipv6-form"])
def test_entries_that_would_split_one_server_are_a_configuration_error(desktop, idp, entries):
    """Found by an outside test: entries written so that msso and the server read a request as under
    different ones (per-resource: each its own token) gave `/admin/x` the `/` entry's token."""
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": entries, "tokens": "per-resource"}}, start=False)
    done = subprocess.run([*desktop.prefix, BIN / "mssod"], env=daemon.env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    assert "resources" in done.stderr and ("must be plain" in done.stderr or "usual form" in done.stderr), done.stderr


def test_idpyoidc_mints_by_token_exchange_for_the_audience_an_entry_names(desktop, chromium, idpy_provider):
    """idpyoidc lists RFC 8693 token exchange in its discovery, so msso exchanges the session's
    token there by default. It sets `aud` only from `audience` (a `resource` alone leaves it the
    client's id): the entry that names its audience ([groups."G".audiences]) gets a token for it;
    the one that does not gets a token for everywhere, which msso refuses to send (exit 6)."""
    from test_providers import browser_login
    idpy = idpy_provider
    api, files = idpy.RESOURCES
    group = idpy.group("browser", scopes=["openid", "profile", "offline_access"], redirect_uri=idpy.redirect_uri,
                       browser_timeout="30s", refresh_lead="2s", resources=[api, files], tokens="per-resource",
                       audiences={api: idpy.AUDIENCES[0]})
    daemon = Broker(desktop, None, groups={GROUP: group})
    try:
        code, _, err, landing, _ = browser_login(daemon, chromium, idpy)
        assert code == 0, err
        for_api = bearer(daemon.msso("sign", "--url", f"{api}items"))
        assert idpy.AUDIENCES[0] in idpy.introspect(for_api, idpy.browser_client)["aud"]
        assert daemon.logged("by=exchange") == 1, "discovery lists the exchange: msso uses it"
        refused = daemon.msso("sign", "--url", f"{files}x")
        assert refused.returncode == 6, refused.stderr
        assert files in refused.stderr and "token exchange" in refused.stderr and "audiences" in refused.stderr
        assert daemon.msso("check").returncode == 0, "the session is kept"
    finally:
        daemon.stop()


def test_an_app_registered_with_fewer_scopes_gets_tokens_with_those_alone(desktop, chromium, idpy_provider):
    """A token per app: msso's registration names `scopes = ["openid"]`, a subset of the group's;
    its tokens are exchanged for that scope alone (idpyoidc honours a narrower scope on the
    exchange), the session's own keeps every scope, and a registration asking for a scope the
    group does not have is refused, named."""
    from test_providers import browser_login
    idpy = idpy_provider
    group = idpy.group("browser", scopes=["openid", "profile", "offline_access"], redirect_uri=idpy.redirect_uri,
                       browser_timeout="30s", refresh_lead="2s")
    daemon = Broker(desktop, None, groups={GROUP: group}, start=False)
    daemon.register("narrow", [BIN / "msso"], [GROUP], scopes=["openid"])
    daemon.start()
    try:
        code, _, err, landing, _ = browser_login(daemon, chromium, idpy)
        assert code == 0, err
        token = bearer(daemon.msso("sign", "--url", idpy.discovery()["userinfo_endpoint"]))
        assert idpy.introspect(token, idpy.browser_client)["scope"] == "openid"
        assert daemon.logged("by=exchange") == 1
        status = json.loads(daemon.msso("status", "--json").stdout)["groups"][0]
        assert status["tokens"][0]["scopes"] == ["openid"] and "resource" not in status["tokens"][0]
        session = desktop.keyring_item()[1]
        SECRETS.update([session["accessToken"], session.get("refreshToken") or ""])
        assert "profile" in idpy.introspect(session["accessToken"], idpy.browser_client)["scope"]
        daemon.register("narrow", [BIN / "msso"], [GROUP], scopes=["openid", "admin"])
        wait_for(lambda: daemon.msso("sign", "--url", idpy.discovery()["userinfo_endpoint"]).returncode == 7,
                 what="the reloaded registration to be refused")
        refused = daemon.msso("sign", "--url", idpy.discovery()["userinfo_endpoint"])
        assert 'registration of app "narrow-0"' in refused.stderr and '"admin"' in refused.stderr, refused.stderr
    finally:
        daemon.stop()


def test_fewer_scopes_where_the_provider_offers_no_exchange_is_refused_and_the_session_kept(desktop, idp):
    """glewlwyd lists no token exchange; a refresh with a narrower scope would be ignored there (and
    narrows the session's own refresh token at django-oauth-toolkit): msso refuses (exit 6) with
    the reason, and spends nothing."""
    daemon = Broker(desktop, idp, start=False)
    daemon.register("narrow", [BIN / "msso"], [GROUP], scopes=["openid"])
    daemon.start()
    try:
        assert daemon.login().returncode == 0
        before = desktop.keyring_item()[1]
        SECRETS.update([before["accessToken"], before["refreshToken"]])
        refused = daemon.msso("sign", "--url", "https://api.example.com/items")
        assert refused.returncode == 6 and "token exchange" in refused.stderr, refused.stderr
        assert desktop.keyring_item()[1]["refreshToken"] == before["refreshToken"]
        assert daemon.msso("check").returncode == 0
    finally:
        daemon.stop()


def test_a_crash_during_a_mint_under_rotation_loses_no_session(desktop):
    """glewlwyd rotates the refresh token on every use, a mint's too. mssod killed -9 after the IdP
    answered a mint and before the keyring stored it (the keyring held still): mssod-idp kept the
    answer, marked as a mint's; the next mssod takes its refresh token (not its access token as the
    session's) and mints again with it. Nothing spent twice, the session kept."""
    from faults import frozen, kill_hard
    from test_durability import refresh_held_at_the_idp, stored
    resource = "http://127.0.0.1:9/api/"  # a name at the IdP: nothing is sent there
    provider = IdP(resources=[resource])
    daemon = Broker(desktop, provider, groups={GROUP: {"resources": [resource], "tokens": "per-resource"}},
                    args=["--keyring-timeout", "3"])
    try:
        assert daemon.device_login(provider).returncode == 0
        _, item = stored(desktop)
        with frozen(provider.pid()):
            sign, _ = refresh_held_at_the_idp(desktop, provider, daemon, url=f"{resource}x")
            keyring = frozen(desktop.keyring.pid)
            keyring.__enter__()
        try:
            wait_for(lambda: not provider.introspect(item["refreshToken"]).get("active"), interval=0.1, what="the IdP to rotate")
            kill_hard(daemon)
            sign.wait(timeout=10)
        finally:
            keyring.__exit__(None, None, None)
        daemon.start()
        token = bearer(daemon.msso("sign", "--url", f"{resource}x"))
        assert provider.introspect(token)["aud"] == resource
        rotated = stored(desktop)[1]["refreshToken"]
        assert rotated != item["refreshToken"] and provider.introspect(rotated)["active"]
        assert stored(desktop)[1]["accessToken"] == item["accessToken"], "the session's own token was not replaced"
        assert daemon.logged("took the answer to a refresh that an earlier mssod did not store") == 1
    finally:
        daemon.stop()
        provider.cleanup()


def test_a_password_login_at_glewlwyd_names_the_way_out(desktop, servers):
    """glewlwyd ignores `resource` on the password grant: the session's refresh token names no
    server, and the first mint is refused (invalid_target). msso says why and what to do (a
    device or browser login), exit 6, and keeps the session; and doctor said it before the login."""
    served, idp, git, api = servers
    daemon = Broker(desktop, idp, groups={GROUP: {"resources": [api, git], "tokens": "per-resource"}})
    try:
        before = daemon.msso("doctor").stdout  # before anyone logs in: what a provider may do
        assert "ignore `resource` on the password grant" in before and "mints the first server only" in before, before
        assert daemon.login().returncode == 0
        refused = daemon.msso("sign", "--url", f"{git}x.git")
        assert refused.returncode == 6, refused.stderr
        assert "password login" in refused.stderr and "`msso login` or `--browser`" in refused.stderr, refused.stderr
        assert daemon.msso("check").returncode == 0
    finally:
        daemon.stop()


def test_a_minted_token_that_names_no_audience_is_refused_and_the_rotated_token_kept(desktop):
    """Found by an outside test: a provider (here a proxy in front of glewlwyd) that answers a mint
    with a JWT naming no audience had it handed out for every server. Now refused (exit 6); and the
    refresh token glewlwyd rotated as it answered is stored, not lost: the next mint, once the
    provider behaves, works with it."""
    import base64
    from fake_idp import FakeIdP
    resource = "http://127.0.0.1:9/api/"
    upstream = IdP(resources=[resource])
    fake = FakeIdP(upstream)
    daemon = None
    try:
        daemon = Broker(desktop, fake, groups={GROUP: {"resources": [resource], "tokens": "per-resource"}})
        assert daemon.device_login(fake).returncode == 0
        before = desktop.keyring_item()[1]["refreshToken"]
        SECRETS.add(before)
        part = lambda value: base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()  # noqa: E731
        fake.token_overrides = {"access_token": f"{part({'alg': 'ES256'})}.{part({'sub': 'alice', 'scope': 'openid'})}.c2ln"}
        refused = daemon.msso("sign", "--url", f"{resource}x")
        assert refused.returncode == 6, refused.stderr
        assert resource in refused.stderr and ("names no audience" in refused.stderr or "is not active" in refused.stderr), refused.stderr
        rotated = desktop.keyring_item()[1]["refreshToken"]
        SECRETS.add(rotated)
        assert rotated != before and upstream.introspect(rotated)["active"], "the rotated refresh token is stored"
        fake.token_overrides = {}
        token = bearer(daemon.msso("sign", "--url", f"{resource}x"))
        assert upstream.introspect(token)["aud"] == resource
    finally:
        if daemon:
            daemon.stop()
        fake.stop()
        upstream.cleanup()


def test_the_python_library_signs_and_takes_tokens_per_server(per_resource):
    """An app through a client library gets the same minted tokens: nothing of the library's own
    changes; the gate picks the token from the URL. And the new error is the library's class."""
    import msso
    daemon, served, idp, git, api = per_resource
    with msso.Client(daemon.socket) as client:
        headers = dict(client.sign("GET", f"{git}x.git"))
        for_git = headers["Authorization"].removeprefix("Bearer ")
        SECRETS.add(for_git)
        assert idp.introspect(for_git)["aud"] == git
        token = client.token(resource=f"{api}api")
        SECRETS.add(token.access_token)
        assert idp.introspect(token.access_token)["aud"] == api
    assert msso.ResourceRefused.exit_status == 6 and issubclass(msso.ResourceRefused, msso.MSSOError)


def test_servers_named_by_a_scope_are_asked_for_by_that_scope_alone(desktop):
    """Entra ID names a server by a scope on the refresh grant (`api://APP/.default`) and refuses
    `resource` (AADSTS901002). Entra cannot run here: a proxy in front of glewlwyd answers the
    refresh grants as Entra does (a JWT for the scope's server; the session's own refresh,
    which names no scope, is glewlwyd's). Expected: each entry of `resource_scopes` asked for
    by its scope alone (no `resource`, no `audience`), its token checked against the scope's
    server, or the `audiences` entry where the provider names it otherwise (Entra's v2 tokens
    carry the app's client id); a token for another server is refused (exit 6)."""
    import base64
    from fake_idp import FakeIdP
    git, k8s, files = "https://git.example.test/", "https://k8s.example.test/", "https://files.example.test/"
    said = {"api://git/.default": "api://git", "api://k8s/.default": "6f1c2d9e-k8s-app", "api://files/.default": "api://git"}
    part = lambda value: base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()  # noqa: E731

    def entra(form):
        if "resource" in form:
            return 400, {"error": "invalid_request", "error_description": "AADSTS901002: The 'resource' request parameter is not supported."}
        scope = form.get("scope", [None])[0]
        if scope is None:
            return None
        token = f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part({'aud': said[scope], 'scp': 'user_impersonation', 'sub': 'alice'})}.c2ln"
        SECRETS.add(token)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600, "scope": scope,
                     "refresh_token": form["refresh_token"][0]}

    upstream = IdP()
    fake = FakeIdP(upstream)
    fake.refresh_answer = entra
    daemon = None
    try:
        daemon = Broker(desktop, fake, groups={GROUP: {
            "resources": [git, k8s, files], "tokens": "per-resource",
            "resource_scopes": {git: "api://git/.default", k8s: "api://k8s/.default", files: "api://files/.default"},
            "audiences": {k8s: "6f1c2d9e-k8s-app"}}})
        assert daemon.login().returncode == 0
        for url, scope in ((f"{git}x.git", "api://git/.default"), (f"{k8s}api", "api://k8s/.default")):
            token = bearer(daemon.msso("sign", "--url", url))
            assert json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==")).get("aud") == said[scope]
        refused = daemon.msso("sign", "--url", f"{files}f")
        assert refused.returncode == 6, refused.stderr
        assert '"api://git"' in refused.stderr and files in refused.stderr, refused.stderr
        mints = [request.form for request in fake.recorded(grant="refresh_token") if "scope" in request.form]
        assert sorted(form["scope"][0] for form in mints) == sorted(said), mints
        assert not any("resource" in form or "audience" in form for form in mints), mints
        assert not any("resource" in request.form for request in fake.recorded(grant="password"))
        assert daemon.msso("check").returncode == 0
    finally:
        if daemon:
            daemon.stop()
        fake.stop()
        upstream.cleanup()


def test_a_login_without_a_refresh_token_where_resource_indicators_need_one_is_a_configuration_error(desktop):
    """A provider that lists no token exchange and gives no refresh token offers no way to mint a
    token per server. Expected: the login says so as a configuration error (78) naming the key,
    keeps nothing (no session, not a session that signs nothing), and the provider is not asked
    to mint; never a fall back to the shared token."""
    from fake_idp import FakeIdP
    resource = "https://api.example.test/"
    upstream = IdP()
    fake = FakeIdP(upstream)
    fake.token_drop = ["refresh_token"]
    daemon = None
    try:
        daemon = Broker(desktop, fake, groups={GROUP: {"resources": [resource], "tokens": "per-resource"}})
        done = daemon.login()
        assert done.returncode == 78, done.stderr
        assert '`tokens = "per-resource"`' in done.stderr and "no refresh token" in done.stderr, done.stderr
        assert 'tokens = \\"shared\\"' in done.stderr or '`tokens = "shared"`' in done.stderr, done.stderr
        assert daemon.msso("check").returncode == 2
        assert daemon.msso("sign", "--url", f"{resource}x").returncode != 0
        assert not fake.recorded(grant="refresh_token")
    finally:
        if daemon:
            daemon.stop()
        fake.stop()
        upstream.cleanup()


def test_a_burst_of_signs_for_two_servers_from_many_programs_mints_each_once(desktop):
    """Twenty `msso sign` processes at once, ten for each of two servers, with no token minted
    yet. Expected: every one succeeds with its server's token (one per server, introspected at
    glewlwyd), the provider is asked once per server (counted at a proxy in front of it), and
    the session is the same one afterwards (no new login, its refresh token still active)."""
    from fake_idp import FakeIdP
    git, api = "http://127.0.0.1:9/git/", "http://127.0.0.1:9/api/"
    upstream = IdP(resources=[git, api], refresh_one_use="never")
    fake = FakeIdP(upstream)
    daemon = None
    try:
        daemon = Broker(desktop, fake, groups={GROUP: {"resources": [git, api], "tokens": "per-resource"}})
        assert daemon.device_login(fake).returncode == 0
        session = desktop.keyring_item()[1]["refreshToken"]
        SECRETS.add(session)
        argv = lambda url: [*desktop.prefix, BIN / "msso", "sign", "--url", url]  # noqa: E731
        burst = [subprocess.Popen(argv(f"{server}r{n}"), env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(10) for server in (git, api)]
        got = {git: set(), api: set()}
        for n, process in enumerate(burst):
            out, err = process.communicate(timeout=60)
            got[(git, api)[n % 2]].add(bearer(subprocess.CompletedProcess([], process.returncode, out, err)))
        assert [len(got[git]), len(got[api])] == [1, 1], "one token per server, every sign the same"
        assert upstream.introspect(next(iter(got[git])))["aud"] == git
        assert upstream.introspect(next(iter(got[api])))["aud"] == api
        mints = [request.form["resource"] for request in fake.recorded(grant="refresh_token") if "resource" in request.form]
        assert sorted(mints) == [[api], [git]], mints
        assert desktop.keyring_item()[1]["refreshToken"] == session and upstream.introspect(session)["active"]
        assert daemon.msso("check").returncode == 0
    finally:
        if daemon:
            daemon.stop()
        fake.stop()
        upstream.cleanup()


def test_a_provider_that_names_introspection_in_its_oauth_metadata_alone_has_each_opaque_token_checked(desktop):
    """django-oauth-toolkit's tokens are opaque and its introspection endpoint is in its OAuth
    metadata (RFC 8414) alone, not in its OpenID discovery: msso handed its minted tokens out
    unchecked (found by a helper's test). Here a proxy in front of glewlwyd leaves introspection
    out of discovery, names it in the metadata, and answers a mint with an opaque token glewlwyd
    does not know. Expected: msso asks the metadata's endpoint, hears "not active", and refuses
    the token (exit 6), the session kept."""
    from fake_idp import FakeIdP
    resource = "http://127.0.0.1:9/api/"
    upstream = IdP(resources=[resource])
    fake = FakeIdP(upstream)
    daemon = None
    try:
        fake.discovery_drop = ["introspection_endpoint"]
        fake.metadata = {"token_endpoint": f"{fake.issuer}/token", "introspection_endpoint": f"{fake.issuer}/introspect"}
        daemon = Broker(desktop, fake, groups={GROUP: {"resources": [resource], "tokens": "per-resource"}})
        assert daemon.device_login(fake).returncode == 0
        fake.token_overrides = {"access_token": "opaque-token-glewlwyd-never-issued"}
        refused = daemon.msso("sign", "--url", f"{resource}x")
        assert refused.returncode == 6, refused.stderr
        assert "is not active" in refused.stderr, refused.stderr
        assert fake.recorded("POST", "/introspect"), "asked the endpoint the metadata names"
        assert daemon.msso("check").returncode == 0
    finally:
        if daemon:
            daemon.stop()
        fake.stop()
        upstream.cleanup()
