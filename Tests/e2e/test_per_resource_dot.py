"""Tokens per server (`tokens = "per-resource"`) at a second real provider, django-oauth-toolkit
3.4.1 (RFC 8707 resource indicators on its password and refresh grants), and the faults a mint
can meet at glewlwyd: the wall clock jumping, the keyring locked.

django-oauth-toolkit, as measured here (its source: oauth2_validators.py
`_check_and_set_request_resource`, `save_bearer_token`, `_create_refresh_token`): msso's
password login sends every entry as `resource`, and it keeps them on the refresh token (and on
the login's access token: introspection `aud` = [A, B]). A refresh with `resource=A` gives a token
whose `aud` is [A]. Then, by its ROTATE_REFRESH_TOKEN:

- on (its default): the new refresh token is bound to [A] alone, so the next mint, for B, is
  refused (400 invalid_target);
- off: the refresh token stays bound to [A, B] and is answered back unchanged, but it keeps one
  access token, which each refresh overwrites: the token minted for B ends the one for A (and the
  first mint ends the login's).

The resource server (token_server.TokenServer with `audiences`) takes under each prefix only a
token whose introspection at the provider is active and names that prefix's entry."""
import json
import os

import pytest
import requests

from harness import GROUP, SECRETS, Broker, IdP, sleep_until
from providers import DjangoProviders
from test_clock import FAKETIME, WallClock
from test_per_resource import bearer, per_resource, servers  # noqa: F401 (fixtures)
from test_tools import repos  # noqa: F401 (fixture)
from token_server import TokenServer

# DOT's words when a refresh asks for a resource its refresh token is not bound to.
BEYOND = "Token refresh cannot request resources beyond the original refresh token scope"


@pytest.fixture(scope="module")
def unrotated():
    """A django-oauth-toolkit site of its own with ROTATE_REFRESH_TOKEN off (its refresh tokens
    used again and again), its access tokens living 5 minutes (none ends during a test)."""
    site = DjangoProviders(token_ttl=300, dot_settings={"ROTATE_REFRESH_TOKEN": False})
    yield site
    site.cleanup()


@pytest.fixture
def two_servers():
    """Servers A and B, two prefixes of one resource server, each taking only its own tokens."""
    served = TokenServer(None, None)
    a, b = f"{served.url}/a/", f"{served.url}/b/"
    served.audiences = {"/a/": a, "/b/": b}
    yield served, a, b
    served.close()


def dot_broker(desktop, dot, a, b):
    group = dot.group("password", resources=[a, b], tokens="per-resource", refresh_lead="1s")
    return Broker(desktop, None, groups={GROUP: group})


def answer(url, token):
    return requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code


def session_item(desktop):
    item = desktop.keyring_item()[1]
    SECRETS.update(token for token in (item.get("accessToken"), item.get("refreshToken")) if token)
    return item


def test_dot_without_rotation_mints_a_token_for_each_server_from_one_password_login(desktop, unrotated, two_servers):
    """One password login; `msso sign` under A and `msso token` under B each get a token minted
    for their server alone: DOT's introspection names A for one and B for the other, A's prefix
    takes the first and refuses the second, B's the reverse. What DOT does then, and what msso
    cannot see: the mint for B overwrote the one access token of the refresh token, so A's token
    is no longer active at DOT; msso still holds it (its expiry is minutes away) and the next sign
    under A hands it out, and A's server refuses it. A renew (what git's `erase` asks) mints A's
    again, which in turn ends B's."""
    import msso
    dot = unrotated.dot
    served, a, b = two_servers
    served.idp = dot
    daemon = dot_broker(desktop, dot, a, b)
    try:
        assert daemon.login().returncode == 0
        session = session_item(desktop)
        assert dot.introspect(session["accessToken"])["aud"] == [a, b], "the password grant kept both resources msso sent"

        for_a = bearer(daemon.msso("sign", "--url", f"{a}items"))
        assert dot.introspect(for_a)["aud"] == [a]
        assert answer(f"{a}items", for_a) == 200 and answer(f"{b}items", for_a) == 401
        assert served.wrong_audience == 1

        token = daemon.msso("token", "--resource", f"{b}items", "--format", "json")
        assert token.returncode == 0, token.stderr
        for_b = json.loads(token.stdout)["accessToken"]
        SECRETS.add(for_b)
        assert for_b != for_a and dot.introspect(for_b)["aud"] == [b]
        assert answer(f"{b}items", for_b) == 200 and answer(f"{a}items", for_b) == 401
        assert served.wrong_audience == 2
        assert daemon.logged("minted an access token") == 2
        after = session_item(desktop)
        assert after["refreshToken"] == session["refreshToken"], "DOT answered the same refresh token back"

        # DOT keeps one access token per refresh token: minting B's ended A's (and A's the login's).
        assert dot.introspect(for_a) == {"active": False}
        assert dot.introspect(session["accessToken"]) == {"active": False}
        held = bearer(daemon.msso("sign", "--url", f"{a}items"))
        assert held == for_a and answer(f"{a}items", held) == 401, "msso cannot tell: it hands out what it holds"
        with msso.Client(daemon.socket) as client:
            renewed = client.token(resource=f"{a}items", renew=True).access_token
        SECRETS.add(renewed)
        assert renewed != for_a and dot.introspect(renewed)["aud"] == [a] and answer(f"{a}items", renewed) == 200
        assert dot.introspect(for_b) == {"active": False}, "and the renewal ended B's"
        assert daemon.msso("check").returncode == 0
    finally:
        daemon.stop()


def test_dot_with_rotation_refuses_the_second_server_names_why_and_keeps_the_session(desktop, django_providers, two_servers):
    """DOT's default, rotation on: the first mint (A) works; its rotated refresh token is bound to
    A alone, so the mint for B is refused with invalid_target and DOT's words. msso says so:
    exit status 6, naming the server, the mechanism, the narrowing and what to do at this
    provider (a shared token: msso said "django-oauth-toolkit always: let its refresh tokens be
    used more than once, or use token exchange", neither of which works there); the session is
    kept (check, status) and A's server still gets its token."""
    dot = django_providers.dot
    served, a, b = two_servers
    served.idp = dot
    daemon = dot_broker(desktop, dot, a, b)
    try:
        assert daemon.login().returncode == 0
        session = session_item(desktop)
        for_a = bearer(daemon.msso("sign", "--url", f"{a}items"))
        assert dot.introspect(for_a)["aud"] == [a] and answer(f"{a}items", for_a) == 200
        rotated = session_item(desktop)["refreshToken"]
        assert rotated != session["refreshToken"], "DOT rotated the refresh token as it minted"

        refused = daemon.msso("sign", "--url", f"{b}items")
        assert refused.returncode == 6, refused.stderr
        words = refused.stderr
        assert b in words and "resource indicators (RFC 8707)" in words and "(invalid_target)" in words, words
        assert "the session is kept" in words and BEYOND in words, words
        assert "narrowed" in words, words
        # What helps at this provider: turning rotation off does not (each mint then ends the
        # token minted before, test above), nor an exchange (it offers none): a shared token does.
        assert "django-oauth-toolkit whenever it rotates them" in words, words
        assert 'use `tokens = "shared"`' in words, words
        assert daemon.logged("minted an access token") == 1
        # What DOT did: the refresh token msso holds is the rotated one, bound to A alone (a
        # refresh for B is refused, one for A is answered), the login's is spent.
        assert session_item(desktop)["refreshToken"] == rotated, "nothing was spent by the refusal"
        assert dot.refresh(session["refreshToken"]).json()["error"] == "invalid_grant"

        assert daemon.msso("check").returncode == 0, "the session is kept"
        assert json.loads(daemon.msso("status", "--json").stdout)["groups"][0]["state"] == "valid"
        again = bearer(daemon.msso("sign", "--url", f"{a}other"))
        assert dot.introspect(again)["aud"] == [a] and answer(f"{a}other", again) == 200
        assert daemon.msso("token", "--resource", f"{b}items").returncode == 6
    finally:
        daemon.stop()


# -- Faults during mints, at glewlwyd -------------------------------------------------------------

def claims(token):
    import base64
    return json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))


@pytest.mark.skipif(not FAKETIME.exists() or os.geteuid() != 0,
                    reason="needs libfaketime (scripts/setup installs faketime) and root, to announce a clock set")
def test_a_wall_clock_jump_has_each_server_minted_anew_and_a_jump_back_hands_out_nothing_stale(desktop):
    """mssod's wall clock (libfaketime, as test_clock.py moves it) jumps two hours ahead: the token
    each entry holds (6 s of life left) is past its end on that clock, so the next sign for each
    gets one minted anew, not the one held; the same session throughout (the refresh token, never
    rotated here, is the login's). Then the clock is put right: the tokens minted while it was
    ahead are stored as ending two hours from now, but end 6 s after they were minted, by the
    IdP's clock and by elapsed time; msso hands neither out after that (it mints again), as it
    does not the session's own token (test_clock.py)."""
    api, git = "http://127.0.0.1:9/api/", "http://127.0.0.1:9/git/"  # names at the IdP: nothing is sent there
    provider = IdP(token_ttl=6, resources=[api, git], refresh_one_use="never")
    clock = WallClock(desktop)
    daemon = Broker(desktop, provider, environment=clock.environment, groups={GROUP: {
        "resources": [api, git], "tokens": "per-resource", "refresh_lead": "1s", "session_timeout": "12h",
        "session_max": "24h"}})
    try:
        assert daemon.device_login(provider).returncode == 0
        session = session_item(desktop)
        first = {entry: bearer(daemon.msso("sign", "--url", f"{entry}x")) for entry in (api, git)}
        assert {entry: provider.introspect(token)["aud"] for entry, token in first.items()} == {api: api, git: git}
        assert all(bearer(daemon.msso("sign", "--url", f"{entry}y")) == token for entry, token in first.items()), "kept while fresh"

        clock.jump(2 * 3600)
        ahead = {entry: bearer(daemon.msso("sign", "--url", f"{entry}x")) for entry in (api, git)}
        for entry, token in ahead.items():
            assert token != first[entry], f"the token held for {entry} was handed out past its end"
            said = provider.introspect(token)
            assert said["active"] and said["aud"] == entry, said
        assert daemon.logged("minted an access token") == 4
        assert daemon.msso("check").returncode == 0
        assert session_item(desktop)["refreshToken"] == session["refreshToken"], "the same session, no new login"

        clock.jump(0)
        sleep_until(max(claims(token)["exp"] for token in ahead.values()) + 0.1)
        for entry, token in ahead.items():
            renewed = bearer(daemon.msso("sign", "--url", f"{entry}x"))
            assert renewed != token, f"the token minted for {entry} while the clock was ahead outlived its real end"
            assert provider.introspect(renewed)["active"]
        assert daemon.logged("minted an access token") == 6
        assert daemon.msso("check").returncode == 0
    finally:
        daemon.stop()
        provider.cleanup()


def test_a_keyring_locked_when_a_mint_is_needed_is_named_and_loses_nothing(per_resource, desktop):  # noqa: F811
    """The desktop keyring locked (as a screen lock may) when a sign needs a token minted: the mint
    is not asked for (its answer could not be stored before use), the sign fails with exit status
    4 naming the lock and how to unlock it; the token already held for the other server is still
    served. Unlocked, the next sign for that server mints and works, in the same session."""
    daemon, served, idp, git, api = per_resource
    for_git = bearer(daemon.msso("sign", "--url", f"{git}x.git"))
    before = session_item(desktop)
    desktop.lock_keyring()
    refused = daemon.msso("sign", "--url", f"{api}api/v1/namespaces")
    assert refused.returncode == 4, refused.stderr
    assert "the keyring is locked" in refused.stderr and "unlock it" in refused.stderr, refused.stderr
    assert daemon.logged("minted an access token") == 1, "nothing asked of the IdP"
    assert bearer(daemon.msso("sign", "--url", f"{git}x.git")) == for_git
    assert daemon.msso("check").returncode == 0

    desktop.unlock_keyring()
    for_api = bearer(daemon.msso("sign", "--url", f"{api}api/v1/namespaces"))
    assert idp.introspect(for_api)["aud"] == api
    after = session_item(desktop)
    assert (after["refreshToken"], after["accessToken"]) == (before["refreshToken"], before["accessToken"]), "the same session"
    assert daemon.msso("check").returncode == 0
