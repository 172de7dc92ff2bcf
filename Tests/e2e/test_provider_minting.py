"""How the harness's real providers mint an access token for one server (RFC 8707 `resource` on a
token request, RFC 8693 token exchange) and for one app (a narrower `scope` on the refresh grant,
RFC 6749 §6): idpyoidc 5.0.0 (idpy_op/serve.py, token exchange enabled) and django-oauth-toolkit
3.4.1 (django_op), asked directly with `requests`, no msso. Each test's docstring states the facts
it shows; a token's `aud` and `scope` are the provider's own, from its RFC 7662 introspection.

idpyoidc's tokens come from an authorization code grant of its login form (IdpyProvider.code_login,
client idpy-xchg, scope openid profile offline_access, so with a refresh token); django-oauth-
toolkit's from its password grant (client dot-password, scope openid email profile)."""
import requests

from harness import PASSWORDS, SECRETS, wait_for

API, FILES = "https://api.example.test/", "https://files.example.test/"  # IdpyProvider.RESOURCES
AUDIENCE = "api-example"  # IdpyProvider.AUDIENCES
FULL = {"openid", "profile", "offline_access"}  # what code_login asks idpyoidc for


def refused(answer, status, error, description=None):
    """The provider said no: an HTTP status, an RFC 6749 §5.2 error code and, if given, its words."""
    body = answer.json()
    assert answer.status_code == status and body.get("error") == error, (answer.status_code, body)
    if description is not None:
        assert body.get("error_description") == description, body
    return body


def granted(answer):
    assert answer.status_code == 200, (answer.status_code, answer.text)
    body = answer.json()
    SECRETS.update(value for key, value in body.items() if key in ("access_token", "refresh_token"))
    return body


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


# -- idpyoidc 5.0.0: RFC 8693 token exchange -------------------------------------------------------

def test_idpyoidc_discovery_lists_token_exchange_on_its_own(idpy_provider):
    """grant_types_supported comes from its oidc Token class's own list, not from the grant types
    configured: it names urn:ietf:params:oauth:grant-type:token-exchange whether enabled or not
    (and CIBA, never configured here; and not `password`, which is). Before the harness enabled it,
    an exchange was answered 400 invalid_request "Unsupported grant_type: urn:ietf:params:oauth:
    grant-type:token-exchange" (not in the client's grant_types_supported). The harness adds an
    introspection endpoint (/introspection)."""
    discovery = idpy_provider.discovery()
    assert discovery["grant_types_supported"] == ["authorization_code", "refresh_token",
                                                  "urn:openid:params:grant-type:ciba", idpy_provider.TOKEN_EXCHANGE]
    assert discovery["introspection_endpoint"] == f"{idpy_provider.issuer}/introspection"


def test_idpyoidc_exchange_puts_audience_into_aud_and_resource_only_beside_an_audience(idpy_provider):
    """Exchanging an access token (subject_token_type ...:access_token): the new token's aud is
    the `audience` values, plus the `resource` values when an audience is also given. `resource`
    alone is checked against the allowed list and then dropped (its process_request reads it only
    together with audience): the token keeps the subject's aud, [client_id]. Without either, aud
    is [client_id] too. The answer: access_token, issued_token_type ...:access_token, token_type
    Bearer, scope, expires_in; no refresh_token, no id_token; the token expires when the subject
    token does (its exp is the subject's, whatever the access token lifetime)."""
    idpy = idpy_provider
    subject = idpy.code_login("idpy-xchg")["access_token"]
    subject_exp = idpy.introspect(subject, "idpy-xchg")["exp"]

    answer = granted(idpy.exchange(subject, audience=AUDIENCE))
    assert set(answer) == {"access_token", "issued_token_type", "token_type", "scope", "expires_in"}, answer
    assert answer["issued_token_type"] == idpy.ACCESS_TOKEN and answer["token_type"] == "Bearer"
    assert set(answer["scope"].split()) == FULL
    seen = idpy.introspect(answer["access_token"], "idpy-xchg")
    assert seen["active"] and seen["aud"] == [AUDIENCE] and seen["client_id"] == "idpy-xchg", seen
    assert seen["exp"] == subject_exp, (seen, subject_exp)

    both = granted(idpy.exchange(subject, resource=[API, FILES], audience=AUDIENCE))
    assert sorted(idpy.introspect(both["access_token"], "idpy-xchg")["aud"]) == sorted([API, FILES, AUDIENCE])

    alone = granted(idpy.exchange(subject, resource=API))
    assert idpy.introspect(alone["access_token"], "idpy-xchg")["aud"] == ["idpy-xchg"]
    neither = granted(idpy.exchange(subject))
    assert idpy.introspect(neither["access_token"], "idpy-xchg")["aud"] == ["idpy-xchg"]
    assert idpy.introspect(subject, "idpy-xchg")["aud"] == ["idpy-xchg"], "the subject's own aud"
    # Its userinfo does not look at aud: an exchanged token works there.
    assert idpy.userinfo(f"Authorization: Bearer {answer['access_token']}").status_code == 200


def test_idpyoidc_refuses_what_its_policy_does_not_allow(idpy_provider):
    """Its policy (validate_token_exchange_policy) answers 400 invalid_target "Unknown resource"
    for a resource not in its list (one unknown among known ones is enough), invalid_target
    "Unknown audience" for an audience not in its list (an empty list would allow any), and
    invalid_request "Actor token not supported" for actor_token. A subject token of another type
    than subject_token_type says, or none at all: invalid_request "Subject token invalid"; an
    expired one: invalid_request "Subject token inactive". requested_token_type ...:id_token:
    invalid_request "Unsupported requested token type"."""
    idpy = idpy_provider
    tokens = idpy.code_login("idpy-xchg")
    subject = tokens["access_token"]
    refused(idpy.exchange(subject, resource="https://elsewhere.example.test/"), 400, "invalid_target", "Unknown resource")
    refused(idpy.exchange(subject, resource=[API, "https://elsewhere.example.test/"]), 400, "invalid_target",
            "Unknown resource")
    refused(idpy.exchange(subject, audience="elsewhere"), 400, "invalid_target", "Unknown audience")
    refused(idpy.exchange(subject, audience=AUDIENCE, actor_token=subject, actor_token_type=idpy.ACCESS_TOKEN),
            400, "invalid_request", "Actor token not supported")
    refused(idpy.exchange(tokens["refresh_token"], idpy.ACCESS_TOKEN), 400, "invalid_request", "Subject token invalid")
    refused(idpy.exchange("not-a-token"), 400, "invalid_request", "Subject token invalid")
    refused(idpy.exchange(subject, requested_token_type="urn:ietf:params:oauth:token-type:id_token"), 400,
            "invalid_request", "Unsupported requested token type")
    wait_for(lambda: not idpy.introspect(subject, "idpy-xchg")["active"], timeout=30, interval=0.25,
             what="the subject access token to expire")
    refused(idpy.exchange(subject, audience=AUDIENCE), 400, "invalid_request", "Subject token inactive")


def test_idpyoidc_exchange_wants_client_authentication_and_any_client_will_do(idpy_provider):
    """Client authentication is required as for every grant at its token endpoint (here
    client_secret_post or client_secret_basic, both work): none is refused, the library raising
    UnAuthorizedClient "Authorization failed", which the harness's Flask front answers as 401
    invalid_client. It does not check that the subject token was issued to the client asking:
    another client (idpy-peer) exchanges idpy-xchg's token and gets one of its own (client_id
    idpy-peer, in a new "exchange" session; no aud at all without an audience)."""
    idpy = idpy_provider
    subject = idpy.code_login("idpy-xchg")["access_token"]
    refused(idpy.exchange(subject, auth=None, audience=AUDIENCE, client_id="idpy-xchg"), 401, "invalid_client",
            "Authorization failed")
    granted(idpy.exchange(subject, auth="basic", audience=AUDIENCE))
    peer = granted(idpy.exchange(subject, client="idpy-peer"))
    seen = idpy.introspect(peer["access_token"], "idpy-xchg")
    assert seen["active"] and seen["client_id"] == "idpy-peer" and "aud" not in seen, seen


def test_idpyoidc_exchange_of_a_refresh_token(idpy_provider):
    """subject_token_type ...:refresh_token: an access token that expires when the refresh token
    does, and its refresh tokens here never do (no expires_in in the answer, exp 0 at
    introspection); `resource` is checked and dropped as for an access token (aud [client_id]),
    and `audience` is refused: invalid_target "Refresh token has single owner".
    requested_token_type ...:refresh_token (offline_access granted) gives a refresh token, in the
    answer's access_token field, with issued_token_type ...:refresh_token and token_type "N_A"; a
    refresh grant takes it."""
    idpy = idpy_provider
    refresh_token = idpy.code_login("idpy-xchg")["refresh_token"]
    answer = granted(idpy.exchange(refresh_token, idpy.REFRESH_TOKEN, resource=API))
    assert "expires_in" not in answer and "refresh_token" not in answer, answer
    assert answer["issued_token_type"] == idpy.ACCESS_TOKEN and answer["token_type"] == "Bearer"
    seen = idpy.introspect(answer["access_token"], "idpy-xchg")
    assert seen["active"] and seen["exp"] == 0 and seen["aud"] == ["idpy-xchg"], seen
    refused(idpy.exchange(refresh_token, idpy.REFRESH_TOKEN, audience=AUDIENCE), 400, "invalid_target",
            "Refresh token has single owner")
    another = granted(idpy.exchange(refresh_token, idpy.REFRESH_TOKEN, requested_token_type=idpy.REFRESH_TOKEN))
    assert another["issued_token_type"] == idpy.REFRESH_TOKEN and another["token_type"] == "N_A", another
    granted(idpy.token_request("idpy-xchg", grant_type="refresh_token", refresh_token=another["access_token"]))


def test_idpyoidc_exchange_narrows_scope(idpy_provider):
    """`scope` on the exchange: the token gets the scopes asked for that the subject token has
    (a narrower scope is honoured; one beyond it is cut to the common part, silently); none in
    common (or none the client may have): 400 invalid_scope "Invalid requested scopes"."""
    idpy = idpy_provider
    subject = idpy.code_login("idpy-xchg")["access_token"]
    narrow = granted(idpy.exchange(subject, audience=AUDIENCE, scope="openid"))
    assert narrow["scope"] == "openid"
    assert idpy.introspect(narrow["access_token"], "idpy-xchg")["scope"] == "openid"
    cut = granted(idpy.exchange(subject, audience=AUDIENCE, scope="openid email"))
    assert cut["scope"] == "openid" and idpy.introspect(cut["access_token"], "idpy-xchg")["scope"] == "openid"
    refused(idpy.exchange(subject, audience=AUDIENCE, scope="email"), 400, "invalid_scope", "Invalid requested scopes")


def test_idpyoidc_refresh_grant_takes_scope_and_ignores_resource(idpy_provider):
    """Its refresh grant: `resource` is ignored (200, aud stays [client_id]); a narrower `scope`
    gives a token with that scope alone (and no new refresh token unless offline_access is among
    it; the one used stays good); a scope beyond the grant's: 400 invalid_request "Invalid refresh
    scopes"."""
    idpy = idpy_provider
    refresh_token = idpy.code_login("idpy-xchg")["refresh_token"]

    def refresh(**params):
        return idpy.token_request("idpy-xchg", grant_type="refresh_token", refresh_token=refresh_token, **params)

    renewed = granted(refresh(resource=API))
    assert idpy.introspect(renewed["access_token"], "idpy-xchg")["aud"] == ["idpy-xchg"]
    narrow = granted(refresh(scope="openid"))
    assert narrow["scope"] == "openid" and "refresh_token" not in narrow, narrow
    assert idpy.introspect(narrow["access_token"], "idpy-xchg")["scope"] == "openid"
    refused(refresh(scope="openid email"), 400, "invalid_request", "Invalid refresh scopes")
    assert set(granted(refresh())["scope"].split()) == FULL


# -- django-oauth-toolkit 3.4.1: RFC 8707 resource, scope on refresh ------------------------------

def password_grant(dot, **params):
    params = dict({"scope": "openid email profile"}, **params)
    return granted(dot.token_request("dot-password", grant_type="password", username="alice",
                                     password=PASSWORDS["alice"], **params))


def refresh(dot, refresh_token, **params):
    return dot.token_request("dot-password", grant_type="refresh_token", refresh_token=refresh_token, **params)


def test_dot_password_grant_binds_the_token_to_its_resources(django_providers):
    """`resource` on its password grant (repeated for several): any absolute URI with a scheme and
    host, no list of allowed ones; the access token's aud (introspection) is the list of them,
    and its refresh token is bound to them too. No resource: no aud. A value that is not such a
    URI (a name, a URN): 400 invalid_target "The resource 'NAME' is not a valid resource
    indicator: it must be an absolute URI with a scheme and host."."""
    dot = django_providers.dot
    one = password_grant(dot, resource=API)
    assert dot.introspect(one["access_token"])["aud"] == [API]
    two = password_grant(dot, resource=[API, FILES])
    assert dot.introspect(two["access_token"])["aud"] == [API, FILES]
    assert "aud" not in dot.introspect(password_grant(dot)["access_token"])
    for name in ("api-example", "urn:example:api"):
        refused(dot.token_request("dot-password", grant_type="password", username="alice", password=PASSWORDS["alice"],
                                  resource=name), 400, "invalid_target",
                f"The resource '{name}' is not a valid resource indicator: it must be an absolute URI with a scheme "
                "and host.")


def test_dot_refresh_with_a_resource_binds_the_new_refresh_token_too(django_providers):
    """`resource` on its refresh grant: an access token with that aud, and the rotated refresh
    token (it rotates them) is bound to the same resources: from then on a refresh without
    resource inherits them, and one for any other resource is refused: 400 invalid_target "The
    requested resource 'URI' is not allowed. Token refresh cannot request resources beyond the
    original refresh token scope". So one refresh token cannot serve several servers in turn;
    from a token bound to [A, B], a refresh for A leaves a refresh token for A alone. The old
    refresh token is spent (invalid_grant)."""
    dot = django_providers.dot
    first = password_grant(dot)
    for_api = granted(refresh(dot, first["refresh_token"], resource=API))
    assert dot.introspect(for_api["access_token"])["aud"] == [API]
    words = ("The requested resource '{}' is not allowed. Token refresh cannot request resources beyond the original "
             "refresh token scope")
    refused(refresh(dot, for_api["refresh_token"], resource=FILES), 400, "invalid_target", words.format(FILES))
    inherited = granted(refresh(dot, for_api["refresh_token"]))
    assert dot.introspect(inherited["access_token"])["aud"] == [API]
    refused(refresh(dot, first["refresh_token"]), 400, "invalid_grant")

    both = password_grant(dot, resource=[API, FILES])
    for_files = granted(refresh(dot, both["refresh_token"], resource=FILES))
    assert dot.introspect(for_files["access_token"])["aud"] == [FILES]
    refused(refresh(dot, for_files["refresh_token"], resource=API), 400, "invalid_target", words.format(API))


def test_dot_resource_servers_check_aud_and_its_userinfo_refuses_bound_tokens(django_providers):
    """Its own protected views check a bound token's aud against the request's URL (prefix match:
    the resource or under it): the harness's /api/a/ takes a token bound to it, /api/b/ answers 401
    WWW-Authenticate: Bearer error="invalid_token", error_description="The access token is not
    valid for this resource."; a token with no resource is taken by both. Its userinfo endpoint
    refuses every bound token, even one bound to the userinfo URL (it checks the request's path,
    not its absolute URL): 401 invalid_token "The access token provided is expired, revoked,
    malformed, or invalid for other reasons."."""
    dot = django_providers.dot
    a, b = django_providers.resource_server("a"), django_providers.resource_server("b")
    bound = password_grant(dot, resource=a)["access_token"]
    free = password_grant(dot)["access_token"]
    assert requests.get(a, headers=bearer(bound), timeout=5).json() == {"api": "a", "user": "alice"}
    other = requests.get(b, headers=bearer(bound), timeout=5)
    assert other.status_code == 401
    assert other.headers["WWW-Authenticate"].startswith(
        'Bearer error="invalid_token",error_description="The access token is not valid for this resource."')
    assert all(requests.get(url, headers=bearer(free), timeout=5).status_code == 200 for url in (a, b))
    assert dot.userinfo(f"Authorization: Bearer {free}").status_code == 200
    for resource in (a, dot.discovery()["userinfo_endpoint"]):
        answer = dot.userinfo(f"Authorization: Bearer {password_grant(dot, resource=resource)['access_token']}")
        refused(answer, 401, "invalid_token",
                "The access token provided is expired, revoked, malformed, or invalid for other reasons.")


def test_dot_refresh_with_a_narrower_scope_narrows_the_refresh_token_too(django_providers):
    """`scope` on its refresh grant: a narrower one gives an access token with that scope alone
    (introspection), and the rotated refresh token keeps only it (oauthlib checks a refresh's
    scope against the previous access token's): asking it for the first scope again is refused,
    and a refresh without scope gives the narrow one. A scope beyond the refresh token's: 400
    {"error": "invalid_scope"}, no error_description."""
    dot = django_providers.dot
    first = password_grant(dot)
    narrow = granted(refresh(dot, first["refresh_token"], scope="openid"))
    assert narrow["scope"] == "openid" and narrow.get("refresh_token"), narrow
    assert dot.introspect(narrow["access_token"])["scope"] == "openid"
    assert refused(refresh(dot, narrow["refresh_token"], scope="openid email profile"), 400,
                   "invalid_scope") == {"error": "invalid_scope"}
    assert granted(refresh(dot, narrow["refresh_token"]))["scope"] == "openid"

    smaller = password_grant(dot, scope="openid email")
    assert refused(refresh(dot, smaller["refresh_token"], scope="openid email profile"), 400,
                   "invalid_scope") == {"error": "invalid_scope"}
