"""A container registry (the Docker Registry HTTP API v2, the little of it a pull's first steps
use) on 127.0.0.1, for the Docker credential helper's tests: https with a self-signed certificate
(as registries are https; the clients are told not to verify it). Like TokenServer, which it extends,
it accepts a request only when its token is active at the real IdP (RFC 7662 introspection): here
the Basic password, as a credential helper hands it to docker and skopeo. Without one it answers
401 with `WWW-Authenticate: Basic`, as registries with basic auth do.

It serves one image, `msso/probe:1.0` (a manifest, its config and one layer), enough for
`skopeo inspect` and `docker manifest inspect`. `seen` holds every token it saw, `users` the
Basic usernames, `refused` counts the 401s.
"""
import base64
import gzip
import hashlib
import io
import json
import tarfile

from token_server import TokenServer

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
REPOSITORY, TAG = "msso/probe", "1.0"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer() -> bytes:
    """A gzipped tar holding one file."""
    content = b"the private registry\n"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("probe.txt")
        info.size, info.mtime = len(content), 0
        tar.addfile(info, io.BytesIO(content))
    return gzip.compress(archive.getvalue(), mtime=0)


class RegistryServer(TokenServer):
    def __init__(self, idp, tls=True):
        rootfs = layer()
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"org.example.probe": "msso"}},
                             "rootfs": {"type": "layers", "diff_ids": [digest(gzip.decompress(rootfs))]}}).encode()
        self.manifest = json.dumps({
            "schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config), "digest": digest(config)},
            "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(rootfs),
                        "digest": digest(rootfs)}]}).encode()
        self.blobs = {digest(config): config, digest(rootfs): rootfs}
        self.users: list[str] = []
        super().__init__(idp, git_root=None, tls=tls)

    def _handler(self):
        base = super()._handler()
        server = self

        class Handler(base):
            def handle_any(self):
                username, _, password = "", "", ""
                authorization = self.headers.get("Authorization", "")
                if authorization.startswith("Basic "):
                    username, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
                user = server.active(password) if password else None
                if password:
                    server.seen.append(password)
                if user is None:
                    server.refused += 1
                    return self.reply(401, b'{"errors": [{"code": "UNAUTHORIZED", "message": "no active token"}]}',
                                      "application/json", {"WWW-Authenticate": 'Basic realm="msso test registry"'})
                server.users.append(username)
                path = self.path.split("?")[0]
                prefix = f"/v2/{REPOSITORY}/"
                if path == "/v2/":
                    return self.reply(200, b"{}", "application/json")
                if path == f"{prefix}tags/list":
                    return self.reply(200, json.dumps({"name": REPOSITORY, "tags": [TAG]}).encode(), "application/json")
                if path in (f"{prefix}manifests/{TAG}", f"{prefix}manifests/{digest(server.manifest)}"):
                    return self.reply(200, server.manifest, MANIFEST, {"Docker-Content-Digest": digest(server.manifest)})
                if path.startswith(f"{prefix}blobs/") and path[len(prefix) + 6:] in server.blobs:
                    blob = path[len(prefix) + 6:]
                    return self.reply(200, server.blobs[blob], "application/octet-stream", {"Docker-Content-Digest": blob})
                self.reply(404, b'{"errors": [{"code": "NAME_UNKNOWN", "message": "no such thing"}]}', "application/json")

            do_GET = do_HEAD = handle_any

            def reply(self, status, content, content_type, headers=None):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(content)))
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(content)

        return Handler
