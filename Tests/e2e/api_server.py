"""A resource server for the Python library's tests, on 127.0.0.1. Like TokenServer (which it
extends), it accepts a token only when the real IdP says it is active (RFC 7662 introspection),
and it checks what each signing profile adds:

- /dpop/...: `Authorization: DPoP` with a proof (RFC 9449) verified with joserfc: its key is the
  one the token is bound to (`cnf.jkt`), `htm`, `htu`, `ath`, a fresh `iat`, an unused `jti`, and
  the server's nonce (§9), which it asks for with a 401 and renews with every 200 (§8.2);
- /signed/...: an RFC 9421 signature by `signature_key`, verified with http-message-signatures,
  covering the method, authority, target URI and authorization, and the body's digest;
- /simple/... and /files/...: a package index (PEP 503) of the files in `index`, for pip, with
  the token as the Basic password (as keyring hands it to pip) or a Bearer token;
- anything else: a bearer token, answered with a JSON echo of whose it is.

`refusals` counts the 401s by reason, `seen` holds every token it saw (tests record them as
secrets).
"""
import base64
import hashlib
import json
import secrets
import threading
import time
from pathlib import Path

import requests
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from http_message_signatures import HTTPMessageVerifier, HTTPSignatureKeyResolver, algorithms
from joserfc import jws
from joserfc.jwk import ECKey, OKPKey

from token_server import TokenServer


class APIServer(TokenServer):
    def __init__(self, idp, index: Path | None = None):
        self.index = index
        self.signature_key: tuple[str, str, str] | None = None  # (PEM, keyid, kind) of the key that signs
        self.refusals: dict[str, int] = {}
        self.nonce = secrets.token_urlsafe(16)
        self.jtis: set[str] = set()
        self.lock = threading.Lock()
        super().__init__(idp, git_root=None)

    def refuse(self, reason):
        with self.lock:
            self.refusals[reason] = self.refusals.get(reason, 0) + 1

    def introspect(self, token: str) -> dict:
        secret = self.idp.secret_file.read_text()
        answer = requests.post(f"{self.idp.issuer}/introspect", data={"token": token, "token_type_hint": "access_token"},
                               auth=("msso", secret), timeout=5)
        return answer.json() if answer.status_code == 200 else {}

    def dpop(self, handler, token: str) -> str | None:
        """Why the request's DPoP proof is refused, or None when it passes (the nonce is checked last)."""
        proof = handler.headers.get("DPoP", "")
        try:
            header = json.loads(base64.urlsafe_b64decode(proof.split(".")[0] + "=="))
            key = (OKPKey if header["jwk"]["kty"] == "OKP" else ECKey).import_key(header["jwk"])
            claims = json.loads(jws.deserialize_compact(proof, key, algorithms=[header["alg"]]).payload)
        except Exception:  # noqa: BLE001 (any unreadable proof is refused)
            return "bad proof"
        token_claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        ath = base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()
        url = f"{self.url}{handler.path.split('?')[0]}"
        checks = {"typ": header.get("typ") == "dpop+jwt", "bound key": token_claims.get("cnf", {}).get("jkt") == key.thumbprint(),
                  "htm": claims.get("htm") == handler.command, "htu": claims.get("htu") == url, "ath": claims.get("ath") == ath,
                  "iat": abs(claims.get("iat", 0) - time.time()) < 60}
        failed = [name for name, ok in checks.items() if not ok]
        if failed:
            return f"proof: {', '.join(failed)}"
        with self.lock:
            if claims.get("jti") in self.jtis:
                return "replayed jti"
            self.jtis.add(claims.get("jti"))
            if claims.get("nonce") != self.nonce:
                return "nonce"
        return None

    def signature(self, handler, body: bytes) -> str | None:
        """Why the request's RFC 9421 signature is refused, or None when it verifies."""
        if self.signature_key is None:
            return "no key"
        pem, key_id, kind = self.signature_key
        public_key = load_pem_public_key(pem.encode())

        class Resolver(HTTPSignatureKeyResolver):
            def resolve_public_key(self, asked):
                return public_key if asked == key_id else None

        message = requests.Request(handler.command, f"{self.url}{handler.path}", headers=dict(handler.headers.items()),
                                   data=body).prepare()
        verifier = HTTPMessageVerifier(signature_algorithm=algorithms.ED25519 if kind == "ed25519" else algorithms.ECDSA_P256_SHA256,
                                       key_resolver=Resolver())
        try:
            verifier.verify(message, expect_tag="msso", require_components=("@method", "@authority", "@target-uri", "authorization"),
                            body=body, max_age=__import__("datetime").timedelta(minutes=5))
        except Exception as error:  # noqa: BLE001 (reported as the reason)
            return f"signature: {error}"
        return None

    def _handler(self):
        base = super()._handler()
        server = self

        class Handler(base):
            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?")[0]
                scheme, _, token = self.headers.get("Authorization", "").partition(" ")
                if scheme == "Basic":
                    token = base64.b64decode(token).decode().partition(":")[2]
                if token:
                    server.seen.append(token)
                introspection = server.introspect(token) if token else {}
                if not introspection.get("active"):
                    server.refuse("inactive token" if token else "no token")
                    return self.answer(401, b'{"error": "no active token"}', "application/json",
                                       {"WWW-Authenticate": 'Basic realm="msso test"' if path.startswith(("/simple/", "/files/"))
                                        else 'Bearer realm="msso test"'})
                user = introspection.get("username") or introspection.get("sub")
                if path.startswith("/dpop/"):
                    refused = "scheme" if scheme != "DPoP" else server.dpop(self, token)
                    if refused:
                        server.refuse(refused)
                        return self.answer(401, json.dumps({"error": refused}).encode(), "application/json",
                                           {"WWW-Authenticate": 'DPoP error="use_dpop_nonce"' if refused == "nonce" else
                                            'DPoP error="invalid_dpop_proof"', "DPoP-Nonce": server.nonce})
                    with server.lock:
                        server.nonce = secrets.token_urlsafe(16)  # a new one for the next proof (RFC 9449 §8.2)
                        nonce = server.nonce
                    return self.answer(200, json.dumps({"user": user, "path": path}).encode(), "application/json",
                                       {"DPoP-Nonce": nonce})
                if path.startswith("/signed/"):
                    refused = server.signature(self, body)
                    if refused:
                        server.refuse(refused)
                        return self.answer(401, json.dumps({"error": refused}).encode(), "application/json")
                    return self.answer(200, json.dumps({"user": user, "path": path, "body": body.decode()}).encode(),
                                       "application/json")
                if path.startswith(("/simple/", "/files/")):
                    return self.file(path)
                if scheme != "Bearer":
                    server.refuse("scheme")
                    return self.answer(401, b'{"error": "a bearer token, please"}', "application/json")
                self.answer(200, json.dumps({"user": user, "path": path}).encode(), "application/json")

            do_GET = do_POST = do_PUT = handle_any

            def file(self, path):
                if server.index is None:
                    return self.answer(404, b"not found", "text/plain")
                target = (server.index / path.lstrip("/")).resolve()
                if target.is_dir():
                    target = target / "index.html"
                if server.index.resolve() not in target.parents or not target.is_file():
                    return self.answer(404, b"not found", "text/plain")
                kind = "text/html" if target.suffix == ".html" else "application/octet-stream"
                self.answer(200, target.read_bytes(), kind)

        return Handler
