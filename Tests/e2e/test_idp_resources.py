"""glewlwyd 2.7.5 and resource indicators (RFC 8707), asked directly (no msso): what the harness's
`IdP(resources=..., refresh_one_use=...)` gives the tests of `tokens = "per-resource"`.

Facts measured here (each test's docstring has its own):
- A login (device or code grant) may name several resources (`resource` repeated); they are stored
  with the grant, but the login's own access token is for none of them (aud = the scope list)
  unless exactly one was named or the token request names one of them.
- A refresh naming a stored resource gives a token whose `aud` (in the JWT and in introspection)
  is that resource; one not stored is refused: 400 {"error": "invalid_target"}, and the refresh
  token is NOT spent by that refusal.
- "never": one refresh token mints each stored resource in turn (and refresh answers carry no
  refresh_token). "always": the rotated refresh token keeps only the resource just asked for.
- A refresh without `resource` gives aud = the scope list when several are stored (the one when
  one is); under "always" its rotated refresh token then keeps NO resource: the session has lost
  its resources for good (every later `resource` is invalid_target).
- The password grant ignores `resource` (200, aud = the scope list, nothing stored).
"""
import base64
import json
from urllib.parse import parse_qs, urlparse

import pytest
import requests

from harness import SECRETS, IdP

A = "https://a.example.test/api"
B = "http://127.0.0.1/b"  # loopback http:// is allowed too
SCOPE = "openid app1"      # the aud of a token that is for no resource
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
REDIRECT = "http://127.0.0.1:4600/callback"


@pytest.fixture(scope="module")
def always():
    provider = IdP(resources=[A, B], refresh_one_use="always")
    yield provider
    provider.cleanup()


@pytest.fixture(scope="module")
def never():
    provider = IdP(resources=[A, B], refresh_one_use="never")
    yield provider
    provider.cleanup()


def post(idp, path, **form):
    """POST to the oidc plugin as client msso (client_secret_basic); tokens answered are secrets."""
    answer = requests.post(f"{idp.issuer}/{path}", data=form, auth=("msso", idp.secret_file.read_text()), timeout=10)
    if answer.status_code == 200 and "json" in answer.headers.get("Content-Type", ""):
        SECRETS.update(v for k, v in answer.json().items() if k.endswith("_token"))
    return answer


def aud(idp, access_token):
    """The token's audience, as its JWT says; introspection must say the same."""
    claimed = json.loads(base64.urlsafe_b64decode(access_token.split(".")[1] + "=="))["aud"]
    assert idp.introspect(access_token)["aud"] == claimed
    return claimed


def device_login(idp, resources, **token_form):
    """A device login as alice naming `resources`; the token endpoint's answer."""
    start = post(idp, "device_authorization", scope=SCOPE, resource=resources)
    assert start.status_code == 200, start.text
    idp.approve_device(start.json()["user_code"])
    return post(idp, "token", grant_type=DEVICE_GRANT, device_code=start.json()["device_code"], **token_form)


def refresh(idp, refresh_token, resource=None):
    return post(idp, "token", grant_type="refresh_token", refresh_token=refresh_token,
                **({"resource": resource} if resource else {}))


def test_a_device_login_stores_its_resources_and_its_own_token_is_for_none_of_them(always):
    """(c) Device authorization with resource=A and resource=B: the login's access token has
    aud = the scope list ("openid app1"), not A nor B. With one resource it is that one; naming
    one of the stored resources at the device_code token request picks it; naming another there is
    400 invalid_target. The refresh token introspects with aud = the client id, whatever the
    resources."""
    login = device_login(always, [A, B])
    assert login.status_code == 200, login.text
    assert aud(always, login.json()["access_token"]) == SCOPE
    assert always.introspect(login.json()["refresh_token"])["aud"] == "msso"
    assert aud(always, device_login(always, [A]).json()["access_token"]) == A
    assert aud(always, device_login(always, [A, B], resource=B).json()["access_token"]) == B
    refused = device_login(always, [A], resource=B)
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid_target")


def test_a_code_login_takes_resources_too(always):
    """The authorization code grant stores repeated `resource` from /auth the same way (its token
    is for the scope list; a refresh picks one). A resource the client may not ask for comes back
    as error=invalid_target on the redirect; one not asked at /auth but named at the code's token
    request is 403 invalid_target (400 for the device grant)."""
    session = requests.Session()
    base = always.issuer.rsplit("/oidc", 1)[0]
    assert session.post(f"{base}/auth/", json={"username": "alice", "password": "alice-pass"}, timeout=10).ok
    assert session.put(f"{base}/auth/grant/msso", json={"scope": SCOPE}, timeout=10).ok

    def authorize(resources):
        answer = session.get(f"{always.issuer}/auth", allow_redirects=False, timeout=10, params={
            "response_type": "code", "client_id": "msso", "redirect_uri": REDIRECT, "scope": SCOPE,
            "state": "s", "nonce": "n", "resource": resources, "g_continue": ""})
        assert answer.status_code == 302
        return {k: v[0] for k, v in parse_qs(urlparse(answer.headers["Location"]).query).items()}

    def exchange(resources, **form):
        return post(always, "token", grant_type="authorization_code", code=authorize(resources)["code"],
                    redirect_uri=REDIRECT, **form)

    login = exchange([A, B])
    assert login.status_code == 200, login.text
    assert aud(always, login.json()["access_token"]) == SCOPE
    assert aud(always, refresh(always, login.json()["refresh_token"], B).json()["access_token"]) == B
    assert aud(always, exchange([A, B], resource=A).json()["access_token"]) == A
    refused = exchange([A], resource=B)
    assert (refused.status_code, refused.json()["error"]) == (403, "invalid_target")
    assert authorize(["https://c.example.test/"])["error"] == "invalid_target"


def test_never_one_refresh_token_mints_each_resource_in_turn(never):
    """"never": the login's refresh token gives aud A, then aud B, then A again, and stays
    active; the refresh answers carry no refresh_token at all."""
    refresh_token = device_login(never, [A, B]).json()["refresh_token"]
    for resource in (A, B, A):
        answer = refresh(never, refresh_token, resource)
        assert answer.status_code == 200, answer.text
        assert aud(never, answer.json()["access_token"]) == resource
        assert "refresh_token" not in answer.json()
    assert never.introspect(refresh_token)["active"]


def test_always_the_rotated_refresh_token_keeps_only_the_resource_asked_for(always):
    """"always": refresh with A gives aud A and a new refresh token (the old one dead); the new
    one with B is 400 {"error": "invalid_target", "error_description": "Invalid Resource"}.
    (a) That refusal does NOT spend the refresh token: it still introspects active, and a refresh
    with A then works (aud A), as does one without resource (aud A: the one resource it keeps)."""
    first = device_login(always, [A, B]).json()["refresh_token"]
    to_a = refresh(always, first, A)
    assert to_a.status_code == 200, to_a.text
    assert aud(always, to_a.json()["access_token"]) == A
    rotated = to_a.json()["refresh_token"]
    assert rotated != first and not always.introspect(first)["active"]

    refused = refresh(always, rotated, B)
    assert refused.status_code == 400
    assert refused.json() == {"error": "invalid_target", "error_description": "Invalid Resource"}
    assert always.introspect(rotated)["active"], "a refusal for the resource spends nothing"
    again = refresh(always, rotated, A)
    assert again.status_code == 200, again.text
    assert aud(always, again.json()["access_token"]) == A
    assert aud(always, refresh(always, again.json()["refresh_token"]).json()["access_token"]) == A


@pytest.mark.parametrize("mode", ["always", "never"])
def test_a_refresh_without_resource(mode, request):
    """(b) After a login with A and B, a refresh without `resource` gives aud = the scope list.
    Under "always" the refresh token it rotates to keeps no resource: a later refresh with A is
    400 invalid_target (the session's resources are gone until the next login). Under "never"
    nothing is lost: A still works."""
    idp = request.getfixturevalue(mode)
    refresh_token = device_login(idp, [A, B]).json()["refresh_token"]
    plain = refresh(idp, refresh_token)
    assert plain.status_code == 200, plain.text
    assert aud(idp, plain.json()["access_token"]) == SCOPE
    later = refresh(idp, plain.json().get("refresh_token", refresh_token), A)
    if mode == "always":
        assert (later.status_code, later.json()["error"]) == (400, "invalid_target")
    else:
        assert later.status_code == 200 and aud(idp, later.json()["access_token"]) == A


def test_the_password_grant_ignores_resource(always):
    """(d) The password grant with resource=A: 200 (no error), aud = the scope list, and nothing is
    stored: its refresh token with resource=A is 400 invalid_target."""
    login = post(always, "token", grant_type="password", username="alice", password="alice-pass",
                 scope=SCOPE, resource=A)
    assert login.status_code == 200, login.text
    assert aud(always, login.json()["access_token"]) == SCOPE
    later = refresh(always, login.json()["refresh_token"], A)
    assert (later.status_code, later.json()["error"]) == (400, "invalid_target")


def test_plugin_parameters_apply_after_disable_enable_and_resources_must_be_https_or_loopback():
    """Without IdP(resources=...) `resource` is ignored (aud = the scope list). Turning it on
    through the admin API (the client's "resource" property, the plugin's parameters) changes
    nothing until PUT .../disable then .../enable. Then a resource the client lists is taken only
    if https:// or loopback http:// (http://example.test/ listed: invalid_target at device
    authorization), and one it does not list is refused (invalid_target)."""
    idp = IdP()
    try:
        def login_aud(resource):
            return aud(idp, device_login(idp, [resource]).json()["access_token"])

        assert login_aud(A) == SCOPE
        admin, base = idp.admin()
        client = admin.get(f"{base}/client/msso", timeout=10).json()
        for member in ("source", "last_seen", "enabled_at"):
            client.pop(member, None)
        client["resource"] = [A, "http://example.test/"]
        assert admin.put(f"{base}/client/msso", json=client, timeout=10).ok
        plugin = admin.get(f"{base}/mod/plugin/oidc", timeout=10).json()
        plugin["parameters"].update({"resource-allowed": True, "resource-client-property": "resource"})
        assert admin.put(f"{base}/mod/plugin/oidc", json=plugin, timeout=10).ok
        assert login_aud(A) == SCOPE, "not yet"
        assert admin.put(f"{base}/mod/plugin/oidc/disable", timeout=10).ok
        assert admin.put(f"{base}/mod/plugin/oidc/enable", timeout=10).ok
        assert login_aud(A) == A
        for refused in ("http://example.test/", "https://c.example.test/"):
            answer = post(idp, "device_authorization", scope=SCOPE, resource=refused)
            assert (answer.status_code, answer.json()["error"]) == (400, "invalid_target"), refused
    finally:
        idp.cleanup()
