#!/usr/bin/env python3
"""The example suite's API: a local HTTP server that accepts a request only when its access token
is one the identity provider vouches for (it asks the IdP's userinfo endpoint, as a resource
server with opaque tokens would). Listens on 127.0.0.1 only.

Usage: resource_server.py PORT ISSUER
"""
import json
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, ISSUER = int(sys.argv[1]), sys.argv[2].rstrip("/")


class API(BaseHTTPRequestHandler):
    def do_GET(self):
        authorization = self.headers.get("Authorization", "")
        if not authorization.startswith("Bearer "):
            return self.answer(401, {"error": "no bearer token"})
        request = urllib.request.Request(f"{ISSUER}/userinfo", headers={"Authorization": authorization})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                user = json.load(response)
        except urllib.error.HTTPError as refused:
            return self.answer(401, {"error": f"the identity provider refused the token ({refused.code})"})
        self.answer(200, {"path": self.path, "user": user.get("sub")})

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass  # quiet: the demo prints what the apps see


ThreadingHTTPServer(("127.0.0.1", PORT), API).serve_forever()
