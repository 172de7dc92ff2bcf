"""A resource server for the tools tests: it accepts a request only when its token is active at the
real IdP (RFC 7662 introspection, with the client's credentials), and then serves

- git over HTTP, through `git http-backend` (CGI), under /git/ (token as the Basic password,
  as git's credential helpers send it, or as a Bearer token);
- a minimal Kubernetes API under /api and /apis (enough for `kubectl get namespaces`);
- anything else: a JSON echo of who the token belongs to.

With `audiences` (path prefix → audience, the longest prefix wins), a token is accepted under a
prefix only when the IdP's introspection names that audience (`aud`): a server of its own, as a
token minted for one server (RFC 8707) is good only there. The IdP is asked through its harness
object's `introspect(token)`: glewlwyd's (harness.IdP) or another provider's (providers.Provider,
e.g. django-oauth-toolkit's, whose `aud` is the list of the token's resources). It records the
tokens it saw, so tests can tell a refreshed token from the first one. With `tls=True` it serves
https with a self-signed certificate for 127.0.0.1 (`certificate`), since kubectl sends
credentials only over TLS.
"""
import base64
import json
import os
import ssl
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests


class TokenServer:
    def __init__(self, idp, git_root: Path, tls=False):
        self.idp = idp
        self.git_root = git_root
        self.seen: list[str] = []
        self.refused = 0
        self.audiences: dict[str, str] = {}
        self.wrong_audience = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.certificate = None
        if tls:
            directory = Path(tempfile.mkdtemp(prefix="msso-tls-"))
            self.certificate = directory / "cert.pem"
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", str(directory / "key.pem"), "-out", str(self.certificate)], check=True, capture_output=True)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.certificate, directory / "key.pem")
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def introspect(self, token: str) -> dict:
        """The IdP's RFC 7662 answer on the token, asked as the harness asks it (its client's
        credentials); {} when it gives none."""
        try:
            return self.idp.introspect(token)
        except (AssertionError, ValueError, requests.RequestException):
            return {}

    @staticmethod
    def user(said: dict) -> str | None:
        """The token's user when the introspection says it is active, else None."""
        return said.get("username") or said.get("sub") if said.get("active") else None

    def active(self, token: str) -> str | None:
        """The token's user when the IdP says it is active, else None."""
        return self.user(self.introspect(token))

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def token(self):
                authorization = self.headers.get("Authorization", "")
                if authorization.startswith("Bearer "):
                    return authorization[7:]
                if authorization.startswith("Basic "):
                    _, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
                    return password
                return None

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                token = self.token()
                said = server.introspect(token) if token else {}
                user = server.user(said)
                if user is None:
                    server.refused += 1
                    return self.answer(401, b'{"error": "no active token"}', "application/json",
                                       {"WWW-Authenticate": 'Basic realm="msso test"'})
                wanted = max((prefix for prefix in server.audiences if self.path.startswith(prefix)), key=len, default=None)
                if wanted is not None:
                    audience = said.get("aud")
                    if server.audiences[wanted] not in (audience if isinstance(audience, list) else [audience]):
                        server.wrong_audience += 1
                        return self.answer(401, json.dumps({"error": "the token is for another server", "aud": audience}).encode(),
                                           "application/json", {"WWW-Authenticate": 'Basic realm="msso test"'})
                server.seen.append(token)
                if self.path.startswith("/git/"):
                    return self.git(body, user)
                if self.path.startswith("/api") or self.path.startswith("/apis"):
                    return self.kubernetes()
                self.answer(200, json.dumps({"user": user, "path": self.path}).encode(), "application/json")

            do_GET = do_POST = handle_any

            def git(self, body, user):
                path, _, query = self.path[len("/git"):].partition("?")
                environment = dict(os.environ, GIT_PROJECT_ROOT=str(server.git_root), GIT_HTTP_EXPORT_ALL="1",
                                   REMOTE_USER=user, PATH_INFO=path, QUERY_STRING=query, REQUEST_METHOD=self.command,
                                   CONTENT_TYPE=self.headers.get("Content-Type", ""), CONTENT_LENGTH=str(len(body)))
                done = subprocess.run(["git", "http-backend"], input=body, env=environment, capture_output=True, timeout=60)
                head, _, content = done.stdout.partition(b"\r\n\r\n")
                status, headers = 200, {}
                for line in head.decode().split("\r\n"):
                    name, _, value = line.partition(": ")
                    if name.lower() == "status":
                        status = int(value.split()[0])
                    elif name:
                        headers[name] = value
                content_type = headers.pop("Content-Type", "application/octet-stream")
                self.answer(status, content, content_type, headers)

            def kubernetes(self):
                path = self.path.split("?")[0]
                documents = {
                    "/api": {"kind": "APIVersions", "versions": ["v1"],
                             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{server.port}"}]},
                    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
                    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                        {"name": "namespaces", "singularName": "", "namespaced": False, "kind": "Namespace",
                         "verbs": ["get", "list"], "shortNames": ["ns"]}]},
                    "/api/v1/namespaces": {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                           "items": [{"metadata": {"name": name, "creationTimestamp": "2026-11-23T00:00:00Z"},
                                                      "status": {"phase": "Active"}} for name in ("default", "msso-test")]},
                }
                if path not in documents:
                    return self.answer(404, b'{"kind": "Status", "status": "Failure", "code": 404}', "application/json")
                self.answer(200, json.dumps(documents[path]).encode(), "application/json")

            def answer(self, status, content, content_type, headers=None):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(content)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args):
                pass

        return Handler
