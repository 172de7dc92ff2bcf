"""What a signed request's headers may reach: an app of the suite (App1, through
MSSOClientFoundation's `SSOClient.data(for:)`) fetches from a server that redirects. A redirect
within the origin is followed, signed anew; one to another origin is not followed, so the token
signed for one server never reaches another (Foundation's own redirect handling copied it there)."""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import BIN, Broker


class Recorder:
    """An HTTP server on 127.0.0.1 that records each request's path and Authorization, and answers
    from `routes` (path → (status, Location or None))."""

    def __init__(self, routes):
        self.seen = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                recorder.seen.append((self.path, self.headers.get("Authorization")))
                status, location = routes.get(self.path, (200, None))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers():
    started = []

    def start(routes):
        server = Recorder(routes)
        started.append(server)
        return server
    yield start
    for server in started:
        server.close()


def fetch(broker, url):
    return broker.desktop.run([BIN / "App1", "fetch", url])


def test_a_redirect_to_another_origin_gets_no_token_and_one_within_is_signed_anew(desktop, idp, servers):
    broker = Broker(desktop, idp)
    try:
        assert broker.login().returncode == 0
        other = servers({})
        api = servers({"/start": (302, f"http://localhost:{other.port}/landed"),
                       "/moved": (301, "/here")})

        done = fetch(broker, f"http://127.0.0.1:{api.port}/start")
        assert done.returncode != 0, "the redirect is the answer, not followed"
        assert "302" in done.stdout
        assert api.seen[0][0] == "/start" and api.seen[0][1].startswith("Bearer ")
        assert other.seen == [], f"another origin was reached with the token: {other.seen}"

        done = fetch(broker, f"http://127.0.0.1:{api.port}/moved")
        assert done.returncode == 0, done.stdout + done.stderr
        assert [path for path, _ in api.seen[1:]] == ["/moved", "/here"]
        assert api.seen[2][1].startswith("Bearer "), "the followed request is signed too"
    finally:
        broker.stop()
