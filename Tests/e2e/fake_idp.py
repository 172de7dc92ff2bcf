"""A fault-injecting OpenID Connect provider for tests: a proxy in front of the real glewlwyd.

`FakeIdP(upstream)` listens on 127.0.0.1 and forwards every request to `upstream` (a harness.IdP),
rewriting glewlwyd's base URL to its own in the discovery document, so that its issuer is
`http://127.0.0.1:PORT/api/oidc` and msso talks only to it. It records every request it receives
(method, path, headers, body). Switches a test sets (each is a plain attribute, read per request):

- `discovery_issuer`: the `issuer` the discovery document claims (a lie: another issuer);
- `discovery_overrides`: endpoints replaced in the discovery document, e.g.
  `{"token_endpoint": "http://idp.invalid/token"}`; `discovery_drop`: members left out of it
  (`["revocation_endpoint"]`);
- `metadata`: members of an OAuth authorization server metadata document (RFC 8414) served at
  `/.well-known/oauth-authorization-server/api/oidc` (its `issuer` is the fake's); None: 404;
- `token_drop`: members left out of every 200 token answer (`["refresh_token"]`), and
  `token_overrides`: members replaced in it (`{"expires_in": 2}`). The fake always leaves out
  `id_token`: glewlwyd signs it with its own issuer, which is not the fake's, so msso rightly
  refuses it; a test of ID tokens uses glewlwyd itself, or:
- `id_token_claims`: the fake mints an ID token of its own for every 200 token answer: valid
  claims for its issuer and client `msso` (sub, preferred_username "alice", iat, exp), updated
  with these (a value None removes the claim), signed ES256 with the fake's own key, published at
  the `jwks_uri` its discovery then names; `id_token_header` updates the JWS header
  (`{"alg": "none"}` sends no signature), and `id_token_signer = "stranger"` signs with a key it
  does not publish (under the published key's `kid`, unless the header says another);
- `token_redirect`: the token endpoint answers every POST with a 307 to this URL (a third origin);
- `token_body_bytes`: the token endpoint answers 200 with a JSON body this large (e.g. 10 MB),
  announced by Content-Length, or sent chunked (no length known up front) with `token_body_chunked`;
- `token_header_bytes`: the token endpoint answers 200 with headers this large (e.g. 10 MB: many
  lines of 8 KB), then a small body;
- `token_drip`: the token endpoint sends the head of a 200 at once, then its body one byte a
  second (each byte well within any read timeout: only a deadline on the whole answer ends it);
- `device_interval`: the `interval` of the device authorization answer, replaced by this JSON
  value (`1e20`, `"inf"`);
- `device_overrides`: fields of the device authorization answer replaced, e.g.
  `{"user_code": "\x1b]0;title\x07ABCD"}` (the code and addresses the user is shown);
- `device_poll_error`: device-code polls of the token endpoint get HTTP 400 with this OAuth error
  (`"expired_token"`) instead of glewlwyd's answer;
- `password_error`: `(status, body)`: password-grant requests get this OAuth error answer (e.g.
  `(400, {"error": "unauthorized_client", "error_description": "…"})`, or a string: an HTML page)
  instead of glewlwyd's;
- `refresh_answer`: a function of the request's form (a dict of lists) giving `(status, body)`,
  or None to pass the request on: refresh-grant requests get this answer instead of glewlwyd's (a
  provider that echoes what it was sent in its `error_description`; one that mints as Entra ID
  does, for a scope naming a server);
- `revoke_hold`: revocation requests get no answer until `release()` (a logout under way, held
  between its steps);
- `fail_refresh(kind, count, retry_after=None)`: the next `count` refresh-grant requests get
  `kind`: "429", "503", "408" (with `Retry-After` when given), "hang" (no answer until
  `release()` or the test ends; the connection is then closed without a response), or "drip"
  (as `token_drip`, until released).

Use it only with the bearer profile: DPoP proofs name the URL they are sent to, and glewlwyd
checks them against its own.

`Recorder` is a bare recording server (the "third origin" a redirect points at). Both offer
`saw(secret)`: whether any recorded byte carries `secret`, also inside form or percent encoding and
inside base64 `Authorization` headers.
"""
import base64
import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote_plus

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
              "content-length", "host"}


@dataclass
class Recorded:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    time: float = field(default_factory=time.monotonic)

    @property
    def form(self) -> dict[str, list[str]]:
        try:
            return parse_qs(self.body.decode("utf-8", "replace"))
        except ValueError:
            return {}

    @property
    def grant(self) -> str | None:
        return self.form.get("grant_type", [None])[0]

    def views(self) -> list[bytes]:
        """Every way the request's bytes could hide a secret: raw, percent/form-decoded, and the
        base64 of Basic (or any) Authorization credentials, decoded then form-decoded."""
        raw = "\n".join([f"{self.method} {self.path}", *(f"{k}: {v}" for k, v in self.headers)]).encode() + b"\n" + self.body
        text = raw.decode("latin-1")
        out = [raw, unquote_plus(text).encode("latin-1", "replace")]
        for name, value in self.headers:
            if name.lower() in ("authorization", "proxy-authorization"):
                for word in value.split():
                    try:
                        decoded = base64.b64decode(word + "=" * (-len(word) % 4), validate=False)
                    except ValueError:
                        continue
                    out += [decoded, unquote_plus(decoded.decode("latin-1")).encode("latin-1", "replace")]
        return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Recording:
    """The request log and the server thread both kinds of server share."""

    def _serve(self, handler_class):
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.server = _Server(("127.0.0.1", 0), handler_class)
        self.server.owner = self
        self.port = self.server.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def record(self, request: Recorded):
        with self._lock:
            self.requests.append(request)

    def recorded(self, method=None, path_suffix=None, grant=None) -> list[Recorded]:
        with self._lock:
            found = list(self.requests)
        return [r for r in found if (method is None or r.method == method)
                and (path_suffix is None or r.path.split("?")[0].endswith(path_suffix))
                and (grant is None or r.grant == grant)]

    def saw(self, secret: str) -> bool:
        needle = secret.encode()
        return any(needle in view for request in self.recorded() for view in request.views())

    def stop(self):
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _take(self) -> Recorded:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, 1 << 20)) if length else b""
        request = Recorded(self.command, self.path, list(self.headers.items()), body)
        self.server.owner.record(request)
        return request

    def _answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status, value, headers=()):
        self._answer(status, json.dumps(value).encode(), [("Content-Type", "application/json"), *headers])


class Recorder(_Recording):
    """A third origin: answers every request 200 `{}`, and remembers it."""

    def __init__(self):
        class Handler(_Handler):
            def do_any(self):
                self._take()
                self._json(200, {})
            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_any
        self._serve(Handler)


class FakeIdP(_Recording):
    """glewlwyd behind a proxy with switches (see the module's docstring)."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.upstream_origin = f"http://127.0.0.1:{upstream.port}"
        self.secret_file = upstream.secret_file
        self.reset()
        self._refresh_faults: list[tuple[str, float | None]] = []
        self._released = threading.Event()
        fake = self

        class Handler(_Handler):
            def do_GET(self):
                fake._handle(self, self._take())

            def do_POST(self):
                fake._handle(self, self._take())

        self._serve(Handler)
        self.issuer = f"{self.origin}/api/oidc"

    def reset(self):
        """Every switch off: a faithful proxy (a dripping answer is let go)."""
        self.discovery_issuer = None
        self.discovery_overrides = {}
        self.token_redirect = None
        self.token_body_bytes = None
        self.token_body_chunked = False
        self.token_header_bytes = None
        self.token_drip = False
        self.device_interval = None
        self.device_overrides = {}
        self.device_poll_error = None
        self.password_error = None
        self.refresh_answer = None
        self.discovery_drop = []
        self.metadata = None
        self.token_drop = []
        self.token_overrides = {}
        self.id_token_claims = None
        self.id_token_header = {}
        self.id_token_signer = "published"
        self.revoke_hold = False

    def fail_refresh(self, kind, count, retry_after=None):
        assert kind in ("429", "503", "408", "hang", "drip"), kind
        with self._lock:
            self._refresh_faults = [(kind, retry_after)] * count
        self._released.clear()

    def release(self):
        """Stops injecting refresh faults; a hung refresh is let go (closed, unanswered)."""
        with self._lock:
            self._refresh_faults = []
        self._released.set()

    def stop(self):
        self._released.set()
        super().stop()

    def approve_device(self, user_code, user="alice"):
        self.upstream.approve_device(user_code, user)

    # -- serving -----------------------------------------------------------------------------

    def _handle(self, handler, request: Recorded):
        path = request.path.split("?")[0]
        if path.endswith("/.well-known/openid-configuration"):
            return self._discovery(handler, request)
        if path == "/fake-jwks":
            key = self._signing_keys()["published"]
            return handler._json(200, {"keys": [key.as_dict(private=False, kid="fake-1", use="sig", alg="ES256")]})
        if path == "/.well-known/oauth-authorization-server/api/oidc":
            if self.metadata is None:
                return handler._json(404, {"error": "not_found"})
            return handler._json(200, dict(self.metadata, issuer=self.issuer))
        if path.endswith("/revoke") and request.method == "POST" and self.revoke_hold:
            self._released.wait(timeout=120) # held unanswered, as a slow provider would
            handler.close_connection = True
            return
        if path.endswith("/token") and request.method == "POST":
            if self.token_redirect:
                return handler._answer(307, b"", [("Location", self.token_redirect)])
            if self.token_body_bytes:
                return self._huge(handler, self.token_body_bytes, self.token_body_chunked)
            if self.token_header_bytes:
                return self._huge_headers(handler, self.token_header_bytes)
            if self.token_drip:
                return self._drip(handler)
            if request.grant == "refresh_token":
                fault = None
                with self._lock:
                    if self._refresh_faults:
                        fault = self._refresh_faults.pop(0)
                if fault:
                    return self._refresh_fault(handler, *fault)
            if request.grant == "urn:ietf:params:oauth:grant-type:device_code" and self.device_poll_error:
                return handler._json(400, {"error": self.device_poll_error})
            if request.grant == "refresh_token" and self.refresh_answer:
                answer = self.refresh_answer(request.form)
                if answer is not None:
                    return handler._json(*answer)
            if request.grant == "password" and self.password_error:
                status, answer = self.password_error
                if isinstance(answer, str):  # a page, as a firewall or a proxy sends one
                    return handler._answer(status, answer.encode(), [("Content-Type", "text/html")])
                return handler._json(status, answer)
        if path.endswith("/device_authorization") and request.method == "POST" and (self.device_interval is not None
                                                                                    or self.device_overrides):
            status, headers, body = self._forward(request)
            if status == 200:
                document = json.loads(body)
                if self.device_interval is not None:
                    document["interval"] = self.device_interval
                document.update(self.device_overrides)
                return handler._json(200, document)
            return handler._answer(status, body, headers)
        status, headers, body = self._forward(request)
        if path.endswith("/token") and request.method == "POST" and status == 200:
            answer = json.loads(body)
            for member in ["id_token", *self.token_drop]:
                answer.pop(member, None)
            if self.id_token_claims is not None:
                answer["id_token"] = self._mint_id_token()
            answer.update(self.token_overrides)
            return handler._json(200, answer)
        handler._answer(status, body, headers)

    _keys = {}

    @staticmethod
    def _signing_keys():
        from joserfc.jwk import ECKey
        if not FakeIdP._keys:
            FakeIdP._keys.update(published=ECKey.generate_key("P-256"), stranger=ECKey.generate_key("P-256"))
        return FakeIdP._keys

    def _mint_id_token(self):
        from joserfc import jws
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": "msso", "sub": "248289761001", "preferred_username": "alice",
                  "iat": now, "exp": now + 300}
        claims.update(self.id_token_claims)
        claims = {k: v for k, v in claims.items() if v is not None}
        header = dict({"alg": "ES256", "kid": "fake-1", "typ": "JWT"}, **self.id_token_header)
        payload = json.dumps(claims).encode()
        if header["alg"] == "none":
            encode = lambda data: base64.urlsafe_b64encode(data).rstrip(b"=").decode()
            return f"{encode(json.dumps(header).encode())}.{encode(payload)}."
        return jws.serialize_compact(header, payload, self._signing_keys()[self.id_token_signer])

    def _forward(self, request: Recorded):
        connection = http.client.HTTPConnection("127.0.0.1", self.upstream.port, timeout=30)
        try:
            headers = {k: v for k, v in request.headers if k.lower() not in HOP_BY_HOP}
            connection.request(request.method, request.path, body=request.body or None, headers=headers)
            response = connection.getresponse()
            body = response.read()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
            return response.status, kept, body
        finally:
            connection.close()

    def _rewrite(self, value):
        if isinstance(value, str):
            return value.replace(self.upstream_origin, self.origin)
        if isinstance(value, list):
            return [self._rewrite(v) for v in value]
        if isinstance(value, dict):
            return {k: self._rewrite(v) for k, v in value.items()}
        return value

    def _discovery(self, handler, request):
        status, headers, body = self._forward(request)
        if status != 200:
            return handler._answer(status, body, headers)
        document = self._rewrite(json.loads(body))
        if self.discovery_issuer is not None:
            document["issuer"] = self.discovery_issuer
        if self.id_token_claims is not None:
            document["jwks_uri"] = f"{self.origin}/fake-jwks"
        document.update(self.discovery_overrides)
        for member in self.discovery_drop:
            document.pop(member, None)
        handler._json(200, document)

    def _huge(self, handler, size, chunked):
        """200 with a JSON body of `size` bytes, streamed; a client that stops reading is fine."""
        head = b'{"access_token": "'
        tail = b'", "token_type": "bearer", "expires_in": 3600}'
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        else:
            handler.send_header("Content-Length", str(size))
        handler.end_headers()

        def write(data):
            if chunked:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            else:
                handler.wfile.write(data)

        chunk = b"A" * 65536
        try:
            write(head)
            left = size - len(head) - len(tail)
            while left > 0:
                write(chunk[:left])
                left -= min(left, len(chunk))
            write(tail)
            if chunked:
                handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client hung up early: as it should
        handler.close_connection = True

    def _huge_headers(self, handler, size):
        """200 whose headers hold `size` bytes (lines of 8 KB), streamed; then a small body."""
        body = b'{"access_token": "a", "token_type": "bearer", "expires_in": 3600}'
        try:
            handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            line = b"X-Padding: " + b"A" * 8192 + b"\r\n"
            for _ in range(size // len(line) + 1):
                handler.wfile.write(line)
            handler.wfile.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass  # the client hung up early: as it should
        handler.close_connection = True

    def _drip(self, handler):
        """The head of a 200 at once, then a byte a second until released (or 10 minutes)."""
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        try:
            for _ in range(600):
                handler.wfile.write(b" ")
                handler.wfile.flush()
                if self._released.wait(timeout=1):
                    break
        except OSError:
            pass  # the client gave up: as it should
        handler.close_connection = True

    def _refresh_fault(self, handler, kind, retry_after):
        if kind == "drip":
            return self._drip(handler)
        if kind == "hang":
            # Hold the request without a byte of answer until released (or the server stops).
            self._released.wait(timeout=120)
            handler.close_connection = True
            return
        extra = [("Retry-After", str(retry_after))] if retry_after is not None else []
        status = int(kind)
        handler._json(status, {"error": "temporarily_unavailable"}, extra)
