"""Tokens a thief cannot use: RFC 9421 message signatures and RFC 9449 DPoP, made by the broker
with keys that never leave it, checked by independent verifiers and the real IdP."""
import base64
import hashlib
import json
import subprocess
import time

import pytest
import requests
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from http_message_signatures import HTTPMessageVerifier, HTTPSignatureKeyResolver, algorithms
from joserfc import jws
from joserfc.jwk import ECKey, OKPKey

from harness import GROUP, SECRETS, Broker, IdP, sleep_until

API = "https://api.example.com/v1/items?page=2"


def signed_headers(broker, *argv):
    done = broker.msso("sign", *argv)
    assert done.returncode == 0, done.stderr
    headers = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition(": ")
        headers[name] = value
    return headers


def public_key(broker):
    return load_pem_public_key(broker.msso("keys", "--format", "pem").stdout.encode())


class Resolver(HTTPSignatureKeyResolver):
    def __init__(self, key, key_id):
        self.key, self.key_id = key, key_id

    def resolve_public_key(self, key_id):
        assert key_id == self.key_id
        return self.key


def verify(broker, method, url, headers, body=None, kind="p-256"):
    """Verifies a request the broker signed with `http-message-signatures` (a third-party library)."""
    key = json.loads(broker.msso("keys", "--json").stdout)
    request = requests.Request(method, url, headers=headers, data=body).prepare()
    algorithm = algorithms.ED25519 if kind == "ed25519" else algorithms.ECDSA_P256_SHA256
    verifier = HTTPMessageVerifier(signature_algorithm=algorithm, key_resolver=Resolver(public_key(broker), key["keyID"]))
    return verifier.verify(request)


@pytest.mark.parametrize("kind", ["p-256", "ed25519"])
def test_message_signatures_verify_with_an_independent_library(desktop, idp, tmp_path, kind):
    broker = Broker(desktop, idp, groups={GROUP: {"sign": "http-signature", "key": kind}})
    try:
        broker.login()
        # Without a body.
        headers = signed_headers(broker, "--url", API, "--header", "Accept: application/json")
        SECRETS.add(headers["Authorization"].split(" ", 1)[1])
        results = verify(broker, "GET", API, {"Accept": "application/json", **headers}, kind=kind)
        params = results[0].parameters
        assert params["alg"] == ("ed25519" if kind == "ed25519" else "ecdsa-p256-sha256") and params["tag"] == "msso"
        assert params["expires"] - params["created"] == 300 and params["nonce"]
        input_ = headers["Signature-Input"]
        for component in ('"@method"', '"@authority"', '"@target-uri"', '"authorization"'):
            assert component in input_, input_

        # With a body: Content-Digest covers it.
        body = tmp_path / "body.json"
        body.write_bytes(b'{"hello": "world"}')
        headers = signed_headers(broker, "--method", "POST", "--url", API, "--header", "Content-Type: application/json",
                                 "--body-file", body)
        assert headers["Content-Digest"] == "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:"
        assert '"content-digest"' in headers["Signature-Input"] and '"content-type"' in headers["Signature-Input"]
        full = {"Content-Type": "application/json", **headers}
        verify(broker, "POST", API, full, body=body.read_bytes(), kind=kind)

        # Tampering is caught.
        with pytest.raises(Exception):
            verify(broker, "POST", API, {**full, "Content-Type": "text/plain"}, body=body.read_bytes(), kind=kind)
        with pytest.raises(Exception):
            verify(broker, "POST", API, {**full, "Content-Digest": "sha-256=:" + base64.b64encode(hashlib.sha256(b"{}").digest()).decode() + ":"},
                   body=b"{}", kind=kind)
        with pytest.raises(Exception):
            verify(broker, "POST", API.replace("page=2", "page=3"), full, body=body.read_bytes(), kind=kind)
    finally:
        broker.stop()


def claims_of(proof, key_json):
    """Verifies a DPoP proof with joserfc and returns (header, claims)."""
    header = json.loads(base64.urlsafe_b64decode(proof.split(".")[0] + "=="))
    jwk = (OKPKey if header["jwk"]["kty"] == "OKP" else ECKey).import_key(header["jwk"])
    token = jws.deserialize_compact(proof, jwk, algorithms=[header["alg"]])
    assert header["jwk"] == {k: v for k, v in key_json["jwk"].items()}, "the proof carries the broker's public key"
    assert "d" not in header["jwk"]
    return header, json.loads(token.payload)


def test_the_idp_binds_tokens_to_the_broker_key_and_every_sign_carries_a_fresh_proof(desktop, idp):
    broker = Broker(desktop, idp, groups={GROUP: {"sign": "dpop"}})
    try:
        assert broker.login().returncode == 0, broker.log.read_text()[-500:]
        key = json.loads(broker.msso("keys", "--json").stdout)
        _, credential = desktop.keyring_item()
        SECRETS.update([credential["accessToken"], credential["refreshToken"]])
        payload = json.loads(base64.urlsafe_b64decode(credential["accessToken"].split(".")[1] + "=="))
        assert payload["cnf"]["jkt"] == key["keyID"], "the IdP bound the access token to the broker's key (RFC 9449 §6)"

        userinfo = f"{idp.issuer}/userinfo"
        jtis = set()
        for _ in range(5):
            headers = signed_headers(broker, "--url", userinfo)
            scheme, token = headers["Authorization"].split(" ", 1)
            assert scheme == "DPoP" and token == credential["accessToken"]
            header, claims = claims_of(headers["DPoP"], key)
            assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256"
            assert claims["htm"] == "GET" and claims["htu"] == userinfo and abs(claims["iat"] - time.time()) < 5
            assert claims["ath"] == base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()
            jtis.add(claims["jti"])
        assert len(jtis) == 5, "no two proofs share a jti"

        accepted = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Authorization: {headers['Authorization']}",
                                   "-H", f"DPoP: {headers['DPoP']}", userinfo], capture_output=True, text=True).stdout
        assert accepted == "200", "the IdP accepts the DPoP-bound token with the broker's proof"
        stolen = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Authorization: Bearer {token}", userinfo],
                                capture_output=True, text=True).stdout
        assert stolen == "401", "the same token without a proof is refused"

        proof = signed_headers(broker, "--method", "POST", "--url", "https://rs.example/a?b=c#d")["DPoP"]
        assert claims_of(proof, key)[1]["htu"] == "https://rs.example/a", "htu has no query or fragment"
    finally:
        broker.stop()


def test_the_nonce_dance_against_an_idp_that_demands_nonces(desktop):
    strict = IdP(dpop_nonce=True)
    broker = None
    try:  # the IdP is cleaned up also when the broker fails to start
        broker = Broker(desktop, strict, groups={GROUP: {"sign": "dpop"}})
        login = broker.login()
        assert login.returncode == 0, login.stderr
        key = json.loads(broker.msso("keys", "--json").stdout)
        userinfo = f"{strict.issuer}/userinfo"
        headers = signed_headers(broker, "--url", userinfo)
        SECRETS.add(headers["Authorization"].split(" ", 1)[1])
        answer = requests.get(userinfo, headers=headers, timeout=5)
        if answer.status_code == 401 and "DPoP-Nonce" in answer.headers:  # the resource server's own nonce
            nonce = answer.headers["DPoP-Nonce"]
            headers = signed_headers(broker, "--url", userinfo, "--dpop-nonce", nonce)
            assert claims_of(headers["DPoP"], key)[1]["nonce"] == nonce
            answer = requests.get(userinfo, headers=headers, timeout=5)
        assert answer.status_code == 200, (answer.status_code, answer.headers, answer.text)
        assert "nonce" in claims_of(headers["DPoP"], key)[1], "proofs carry the newest nonce"
    finally:
        if broker:
            broker.stop()
        strict.cleanup()


def test_no_verb_command_or_log_shows_a_private_key(desktop, idp):
    broker = Broker(desktop, idp, groups={GROUP: {"sign": "dpop+http-signature", "key": "ed25519"}})
    try:
        broker.login()
        shown = broker.msso("keys", "--json").stdout + broker.msso("keys").stdout + broker.msso("keys", "--format", "pem").stdout
        _, stored = desktop.keyring_item(schema="org.msso.Key")
        private = stored["privateKey"]
        SECRETS.add(private)
        raw = base64.b64decode(private)
        assert private not in shown and base64.urlsafe_b64encode(raw).rstrip(b"=").decode() not in shown
        assert '"d"' not in shown
        signed = broker.msso("sign", "--url", API).stdout
        assert private not in signed
        assert private not in broker.log.read_text()
    finally:
        broker.stop()


def test_the_key_outlives_logout_and_rotation_replaces_it(desktop, idp):
    broker = Broker(desktop, idp, groups={GROUP: {"sign": "dpop"}})
    try:
        broker.login()
        first = json.loads(broker.msso("keys", "--json").stdout)["keyID"]
        broker.msso("logout")
        broker.restart()
        assert json.loads(broker.msso("keys", "--json").stdout)["keyID"] == first, "services keep trusting the same key"
        broker.login()
        rotated = json.loads(broker.msso("keys", "--rotate", "--json").stdout)["keyID"]
        assert rotated != first
        assert broker.msso("check").returncode == 2, "tokens bound to the old key died with it"
        assert broker.login().returncode == 0
        _, credential = desktop.keyring_item()
        SECRETS.update([credential["accessToken"], credential["refreshToken"]])
        payload = json.loads(base64.urlsafe_b64decode(credential["accessToken"].split(".")[1] + "=="))
        assert payload["cnf"]["jkt"] == rotated
    finally:
        broker.stop()


def test_a_second_verifier_with_a_covered_component_policy(desktop, idp, tmp_path):
    """requests-http-signature: stricter about what must be covered, and checks the digest itself."""
    from requests_http_signature import HTTPSignatureAuth
    from requests_http_signature import algorithms as rhs_algorithms

    broker = Broker(desktop, idp, groups={GROUP: {"sign": "http-signature"}})
    try:
        broker.login()
        key_id = json.loads(broker.msso("keys", "--json").stdout)["keyID"]
        body = tmp_path / "body.json"
        body.write_bytes(b'{"item": 42}')
        headers = signed_headers(broker, "--method", "PUT", "--url", API, "--header", "Content-Type: application/json",
                                 "--body-file", body)
        headers["Content-Type"] = "application/json"
        policy = dict(require_components=("@method", "@authority", "@target-uri", "authorization", "content-type"),
                      signature_algorithm=rhs_algorithms.ECDSA_P256_SHA256, key_resolver=Resolver(public_key(broker), key_id),
                      expect_tag="msso", max_age=__import__("datetime").timedelta(minutes=5))
        result = HTTPSignatureAuth.verify(requests.Request("PUT", API, headers=headers, data=body.read_bytes()).prepare(), **policy)
        assert result.parameters["keyid"] == key_id
        with pytest.raises(Exception):  # the body is not the one whose digest was signed
            HTTPSignatureAuth.verify(requests.Request("PUT", API, headers=headers, data=b'{"item": 43}').prepare(), **policy)
    finally:
        broker.stop()


def test_dpop_bound_tokens_refresh_with_a_proof(desktop):
    short = IdP(token_ttl=40)
    broker = None
    try:
        broker = Broker(desktop, short, groups={GROUP: {"sign": "dpop", "refresh_lead": "38s"}})
        broker.login()
        _, before = desktop.keyring_item()
        sleep_until(before["accessTokenExpiresAt"] - 38 + 0.1)  # within the refresh lead
        headers = signed_headers(broker, "--url", f"{short.issuer}/userinfo")
        _, after = desktop.keyring_item()
        SECRETS.update([before["accessToken"], before["refreshToken"], after["accessToken"], after["refreshToken"]])
        assert after["accessToken"] != before["accessToken"], "refreshed (the IdP demands a proof for bound tokens)"
        assert requests.get(f"{short.issuer}/userinfo", headers=headers, timeout=5).status_code == 200
    finally:
        if broker:
            broker.stop()
        short.cleanup()
