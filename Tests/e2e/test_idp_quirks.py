"""What providers other than glewlwyd do differently, reproduced with the real glewlwyd behind the
fault-injecting fake (fake_idp.py), and what msso must do about each: revoke where the provider can
(RFC 8414 metadata when discovery names no endpoint) and otherwise say plainly what stays valid;
end a session that has no refresh token when its access token expires; authenticate the client
the way the provider takes; send `prompt`; name `redirect_uri` when the provider refuses it.

The providers these quirks come from are in test_real_idps.py, through their own login pages.
"""
import base64
import json
import subprocess
from urllib.parse import parse_qs, urlparse

import pytest
import requests

from fake_idp import FakeIdP
from harness import BIN, GROUP, SECRETS, Broker, IdP, RawClient, free_port, wait_for
from test_browser_login import REDIRECT, browser, start_login

URL = "https://api.example.com/items"


@pytest.fixture
def fake(idp):
    proxy = FakeIdP(idp)
    yield proxy
    proxy.stop()


def introspect(idp, token):
    """glewlwyd's own verdict on a token (RFC 7662), asked directly, not through the fake."""
    return idp.introspect(token)["active"]


def stored_refresh_token(desktop):
    _, secret = desktop.keyring_item()
    return secret["refreshToken"]


# -- logout: revoke wherever the provider can, else say what stays valid --------------------------

def test_logout_revokes_through_oauth_metadata_when_discovery_names_no_endpoint(desktop, idp, fake):
    """django-oauth-toolkit names its RFC 7009 endpoint only in RFC 8414 metadata."""
    fake.discovery_drop = ["revocation_endpoint"]
    fake.metadata = {"token_endpoint": f"{fake.issuer}/token", "revocation_endpoint": f"{fake.issuer}/revoke"}
    broker = Broker(desktop, fake)
    try:
        assert broker.login().returncode == 0
        refresh_token, access_token = stored_refresh_token(desktop), desktop.keyring_item()[1]["accessToken"]
        assert introspect(idp, refresh_token) and introspect(idp, access_token)
        done = broker.msso("logout", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"loggedOut": [GROUP], "revoked": True, "sessions": [{"group": GROUP, "account": "default"}]}
        revocations = fake.recorded("POST", "/revoke")
        assert [r.form.get("token_type_hint") for r in revocations] == [["refresh_token"], ["access_token"]]
        assert not introspect(idp, refresh_token), "the refresh token is dead at the provider"
        assert not introspect(idp, access_token), "and so is the access token (outside attack: it lived on)"
    finally:
        broker.stop()


def test_a_provider_without_revocation_is_told_plainly_and_the_session_still_ends(desktop, idp, fake):
    """LemonLDAP::NG and django-oidc-provider have no revocation endpoint anywhere."""
    fake.discovery_drop = ["revocation_endpoint"]
    broker = Broker(desktop, fake)
    try:
        assert broker.login().returncode == 0
        refresh_token = stored_refresh_token(desktop)
        status = broker.status_json()
        done = broker.msso("logout", "--json")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["loggedOut"] == [GROUP] and result["revoked"] is False, result
        assert result["notRevoked"] == [{
            "group": GROUP, "account": "default", "reason": f'the identity provider of "{GROUP}" offers no token revocation (RFC 7009)',
            "accessTokenExpiresAt": status["accessTokenExpiresAt"], "refreshToken": True}]
        assert fake.recorded("GET", "/.well-known/oauth-authorization-server/api/oidc"), "RFC 8414 metadata was looked for"
        assert introspect(idp, refresh_token), "nothing could revoke it: the test is honest about the provider"
        # Either way the local copy is gone and every app is logged out.
        assert desktop.keyring_item() is None
        assert broker.msso("sign", "--url", URL).returncode == 2

        # In words, once, from both commands that log out.
        for binary in ("msso", "msso-logout"):
            assert broker.login().returncode == 0
            text = broker.msso(*(["logout"] if binary == "msso" else []), binary=binary)
            assert text.returncode == 0, text.stderr
            lines = text.stdout.splitlines()
            assert lines[0] == f"Logged out of {GROUP}.", text.stdout
            assert len(lines) == 2 and "not revoked at the identity provider" in lines[1], text.stdout
            assert "offers no token revocation" in lines[1] and "its refresh token until the provider expires it" in lines[1]
    finally:
        broker.stop()


def test_a_revocation_the_provider_refuses_is_reported_with_its_words(desktop, idp, fake):
    fake.discovery_overrides = {"revocation_endpoint": f"{fake.issuer}/revoke-that-fails"}
    broker = Broker(desktop, fake)
    try:
        assert broker.login().returncode == 0
        done = broker.msso("logout", "--json")
        result = json.loads(done.stdout)
        assert done.returncode == 0 and result["revoked"] is False, done.stdout
        assert "refused to revoke the tokens (HTTP 404)" in result["notRevoked"][0]["reason"], result
    finally:
        broker.stop()


# -- a provider that gives no refresh token --------------------------------------------------------

def test_without_a_refresh_token_the_session_ends_with_its_access_token(desktop, idp, fake):
    """idpyoidc issues refresh tokens only for offline_access: then nothing can renew the access
    token, and status, check, sign and token must all agree that the session is over."""
    fake.token_drop = ["refresh_token"]
    fake.token_overrides = {"expires_in": 3}
    broker = Broker(desktop, fake)
    try:
        assert broker.login().returncode == 0
        status = broker.status_json()
        assert status["state"] == "valid"
        assert status["sessionExpiresAt"] == status["accessTokenExpiresAt"], "the session cannot outlive its token"
        assert broker.msso("sign", "--url", URL).returncode == 0, "the token signs while it lasts"
        wait_for(lambda: broker.msso("check").returncode == 1, timeout=15, what="check to say expired")
        assert broker.status_json()["state"] == "expired"
        for verb in (["sign", "--url", URL], ["token"]):
            done = broker.msso(*verb)
            assert done.returncode == 1, (verb, done.returncode, done.stderr)
            assert "gave no refresh token" in done.stderr and "msso login" in done.stderr, done.stderr
        assert not fake.recorded("POST", "/token", grant="refresh_token"), "no refresh without a refresh token"
    finally:
        broker.stop()


# -- client authentication ---------------------------------------------------------------------------

def token_requests(fake):
    return fake.recorded("POST", "/token", grant="password")


def test_client_secret_post_when_configured_or_when_the_provider_offers_only_that(desktop, idp, fake):
    secret = fake.secret_file.read_text()
    # The default, where the provider lists Basic: the secret in the Authorization header only.
    broker = Broker(desktop, fake)
    try:
        assert broker.login().returncode == 0
        request = token_requests(fake)[-1]
        assert any(k.lower() == "authorization" and v.startswith("Basic ") for k, v in request.headers)
        assert "client_secret" not in request.form
    finally:
        broker.stop()

    for how, groups in [("configured", {GROUP: {"token_endpoint_auth_method": "client_secret_post"}}),
                        ("from discovery", {GROUP: {}})]:
        fake.discovery_overrides = {"token_endpoint_auth_methods_supported": ["client_secret_post"]} if how == "from discovery" else {}
        broker = Broker(desktop, fake, groups=groups)
        try:
            done = broker.login()
            assert done.returncode == 0, (how, done.stderr)
            request = token_requests(fake)[-1]
            assert request.form.get("client_secret") == [secret] and request.form.get("client_id") == ["msso"], how
            assert not any(k.lower() == "authorization" for k, _ in request.headers), how
            done = broker.msso("logout", "--json")
            assert json.loads(done.stdout)["revoked"] is True, (how, done.stdout)
            assert fake.recorded("POST", "/revoke")[-1].form.get("client_secret") == [secret], "the revocation too"
        finally:
            broker.stop()


# -- the browser login: prompt, and a redirect URI the provider does not know ------------------------

def test_prompt_is_sent_consent_by_default_with_offline_access(desktop, idp):
    broker = Broker(desktop, idp, groups={GROUP: {"redirect_uri": REDIRECT, "scopes": ["openid", "app1", "offline_access"]}})
    try:
        cli, url = start_login(broker)
        cli.kill()
        cli.wait()
        assert parse_qs(urlparse(url).query)["prompt"] == ["consent"], url
    finally:
        broker.stop()
    broker = Broker(desktop, idp, groups={GROUP: {"redirect_uri": REDIRECT, "prompt": "login"}})
    try:
        cli, url = start_login(broker)
        assert parse_qs(urlparse(url).query)["prompt"] == ["login"], url
        landing = browser(idp, url)
        assert landing.status_code == 200
        cli.wait(timeout=30)
        assert cli.returncode == 0, cli.stderr.read()
        assert broker.status_json()["state"] == "valid"
    finally:
        broker.stop()


def test_a_redirect_uri_the_provider_does_not_know_is_named_at_once(desktop, idp):
    unknown = f"http://127.0.0.1:{free_port()}/elsewhere"
    broker = Broker(desktop, idp, groups={GROUP: {"redirect_uri": unknown}})
    try:
        done = subprocess.run([BIN / "msso", "login", "--browser"], env=broker.env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 78, (done.returncode, done.stderr)
        assert f"redirect_uri {unknown}" in done.stderr and "register" in done.stderr, done.stderr
        assert "open this address" not in done.stderr, "the user was not sent to an error page"
    finally:
        broker.stop()


def test_private_key_jwt_logs_in_refreshes_and_revokes_with_no_shared_secret(desktop, idp):
    """glewlwyd's client "msso-jwt" is registered with the public half of DIR/client_key.pem and
    takes no secret: every request to the token and revocation endpoints carries an assertion
    signed with the key (RFC 7523), which glewlwyd verifies."""
    broker = Broker(desktop, idp, groups={GROUP: {"client_id": "msso-jwt", "client_secret_file": None,
                                                  "client_key": str(idp.dir / "client_key.pem")}})
    try:
        done = broker.login()
        assert done.returncode == 0, done.stderr
        assert broker.msso("sign", "--url", URL).returncode == 0
        _, secret = desktop.keyring_item()
        client = RawClient(broker.socket)
        try:
            renewed = client.call("token", {"renew": True})
            assert "result" in renewed, renewed
            SECRETS.add(renewed["result"]["accessToken"])
        finally:
            client.close()
        assert desktop.keyring_item()[1]["refreshToken"] != secret["refreshToken"], "a refresh, authenticated by the key"
        done = broker.msso("logout", "--json")
        assert json.loads(done.stdout) == {"loggedOut": [GROUP], "revoked": True, "sessions": [{"group": GROUP, "account": "default"}]}, done.stdout
    finally:
        broker.stop()

    # A key the provider does not know for the client gets nothing.
    other = idp.dir / "other_key.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", other],
                   check=True, capture_output=True)
    broker = Broker(desktop, idp, groups={GROUP: {"client_id": "msso-jwt", "client_secret_file": None, "client_key": str(other)}})
    try:
        done = broker.login()
        assert done.returncode != 0 and desktop.keyring_item() is None, done.stderr
    finally:
        broker.stop()


def test_private_key_jwt_with_the_brokers_own_key_registered_from_msso_keys(desktop, idp):
    """Without client_key, the group's own key signs: `msso keys` makes it and shows the public
    half, which the administrator registers at the provider."""
    client_id = f"msso-own-{free_port()}"
    broker = Broker(desktop, idp, groups={GROUP: {"client_id": client_id, "client_secret_file": None,
                                                  "token_endpoint_auth_method": "private_key_jwt"}})
    try:
        early = broker.login()
        assert early.returncode == 78 and f"run `msso keys --group {GROUP}`" in early.stderr, early.stderr
        pem = broker.msso("keys", "--format", "pem")
        assert pem.returncode == 0 and "BEGIN PUBLIC KEY" in pem.stdout, pem.stderr
        idp.add_client(client_id, pem.stdout)
        done = broker.login()
        assert done.returncode == 0, done.stderr
        assert broker.msso("sign", "--url", URL).returncode == 0
        assert json.loads(broker.msso("logout", "--json").stdout)["revoked"] is True
    finally:
        broker.stop()


# -- ID tokens: checked before a session is stored ----------------------------------------------------

def test_the_name_shown_comes_from_a_checked_id_token(desktop, idp, fake):
    fake.id_token_claims = {"preferred_username": None, "email": "alice@example.test", "name": "Alice Liddell"}
    broker = Broker(desktop, fake)
    try:
        assert broker.login().returncode == 0
        assert broker.status_json()["username"] == "alice@example.test", "preferred_username, then email, name, sub"
        assert fake.recorded("GET", "/fake-jwks"), "the signature was checked against the provider's keys"
    finally:
        broker.stop()


ID_TOKEN_REFUSALS = {
    # name: (switches, exit status, words the refusal must say)
    "another audience": ({"id_token_claims": {"aud": "someone-else"}}, 78, "audience"),
    "another issuer": ({"id_token_claims": {"iss": "https://idp.example"}}, 78, "issuer"),
    "expired": ({"id_token_claims": {"exp": 1_000_000_000, "iat": 999_999_000}}, 5, "expired"),
    "unsigned": ({"id_token_claims": {}, "id_token_header": {"alg": "none"}}, 78, "none"),
    "a key the provider does not publish": ({"id_token_claims": {}, "id_token_signer": "stranger"}, 5, "signature"),
    "a kid the provider does not publish": ({"id_token_claims": {}, "id_token_header": {"kid": "nobody"}}, 5, "nobody"),
}


def test_a_kid_not_in_the_cached_keys_fetches_them_once_more(desktop, idp, fake):
    """Providers rotate their keys: a token under a kid msso has not seen makes it fetch the
    provider's keys again, once; a kid that is still not there is refused."""
    fake.id_token_claims = {}
    broker = Broker(desktop, fake)
    try:
        assert broker.login().returncode == 0
        assert len(fake.recorded("GET", "/fake-jwks")) == 1
        assert broker.msso("logout").returncode == 0
        fake.id_token_header = {"kid": "rotated"}
        done = broker.login()
        assert done.returncode == 5 and "rotated" in done.stderr, done.stderr
        assert len(fake.recorded("GET", "/fake-jwks")) == 2, "fetched once more, and only once"
    finally:
        broker.stop()


@pytest.mark.parametrize("case", list(ID_TOKEN_REFUSALS))
def test_an_id_token_that_fails_its_checks_stores_no_session(desktop, idp, fake, case):
    switches, status, words = ID_TOKEN_REFUSALS[case]
    for name, value in switches.items():
        setattr(fake, name, value)
    broker = Broker(desktop, fake)
    try:
        done = broker.login()
        assert done.returncode == status and words in done.stderr, (case, done.returncode, done.stderr)
        assert "ID token" in done.stderr, done.stderr
        assert desktop.keyring_item() is None and broker.status_json()["state"] == "notLoggedIn"
    finally:
        broker.stop()


def test_a_browser_login_answered_without_an_id_token_is_refused(desktop, idp, fake):
    """Outside attack: whoever answers the token endpoint could drop the ID token, and with it
    the nonce that ties the tokens to this login. OpenID Connect's code flow always carries one."""
    broker = Broker(desktop, fake, groups={GROUP: {"redirect_uri": REDIRECT}})
    try:
        cli, url = start_login(broker)
        browser(idp, url)
        cli.wait(timeout=30)
        err = cli.stderr.read()
        assert cli.returncode == 5 and "without an ID token" in err, (cli.returncode, err)
        assert desktop.keyring_item() is None
    finally:
        broker.stop()


def test_a_refresh_answered_with_another_users_tokens_ends_the_session(desktop, idp, fake):
    """Outside attack: a refresh answered with bob's genuine tokens was taken silently, alice's
    session now bob's. The refresh's ID token names bob: the session ends (OpenID Connect Core §12.2)."""
    fake.id_token_claims = {"sub": "alice-sub"}
    broker = Broker(desktop, fake)
    try:
        assert broker.login().returncode == 0
        fake.id_token_claims = {"sub": "bob-sub", "preferred_username": "bob"}
        client = RawClient(broker.socket)
        try:
            answer = client.call("token", {"renew": True})
        finally:
            client.close()
        assert answer.get("error") == "Expired" and "another user's tokens" in answer["message"], answer
        assert broker.msso("check").returncode == 1
        assert broker.status_json()["username"] == "alice"
    finally:
        broker.stop()


def test_a_signing_key_whose_coordinate_glewlwyd_publishes_without_its_leading_zero(desktop, tmp_path):
    """glewlwyd (through rhonabwy) publishes an EC key's x or y without its leading zero bytes,
    which RFC 7518 says not to do: for about one fresh key in 128. Before, msso skipped such a key
    as malformed and refused every login with "signed with a key it does not publish", at random
    across the suite's fresh providers. Expected: the key is the same integer padded back, and a
    password login, whose ID token is checked against it, succeeds."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    while key.public_key().public_numbers().x >= 2 ** 248:
        key = ec.generate_private_key(ec.SECP256R1())
    pem = tmp_path / "signing.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                      serialization.NoEncryption()))
    provider = IdP(signing_key=pem)
    broker = None
    try:
        published = requests.get(f"{provider.issuer}/jwks", timeout=5).json()["keys"]
        assert len(published) == 1 and len(base64.urlsafe_b64decode(published[0]["x"] + "==")) < 32, published  # the quirk
        broker = Broker(desktop, provider)
        login = broker.login()
        assert login.returncode == 0, login.stderr
        assert broker.status_json()["state"] == "valid"
    finally:
        if broker:
            broker.stop()
        provider.cleanup()
