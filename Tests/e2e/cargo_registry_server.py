"""A cargo registry (the sparse index protocol, RFC 2789, and its crate downloads) on 127.0.0.1, for
the cargo credential provider's tests: https with a self-signed certificate (cargo is told to trust
it with `http.cainfo`). Its `config.json` says `"auth-required": true` (RFC 3139), so cargo sends a
token with every request, config.json's included; like RegistryServer, it extends TokenServer and
accepts a request only when the token is active at the real IdP (RFC 7662 introspection): here
the `Authorization: Bearer` value, as cargo sends what its credential provider answered. Without
one it answers 401 with `WWW-Authenticate: Cargo`, as authenticated registries do.

It serves one crate, `msso-probe` 1.0.0, a `.crate` (a gzipped tar: Cargo.toml and src/lib.rs) it
makes itself, and its index entry with the archive's SHA-256. `seen` holds every token it saw,
`authorizations` every Authorization value, `served` the paths it answered 200, `refused` counts
the 401s.
"""
import gzip
import hashlib
import io
import json
import tarfile

from token_server import TokenServer

CRATE, VERSION = "msso-probe", "1.0.0"


def crate_archive() -> bytes:
    """The .crate: a gzipped tar whose one directory is NAME-VERSION, as cargo package makes it."""
    files = {
        "Cargo.toml": f'[package]\nname = "{CRATE}"\nversion = "{VERSION}"\nedition = "2021"\n'
                      'description = "A crate only the private registry has"\nlicense = "MIT"\n',
        "src/lib.rs": 'pub fn probe() -> &\'static str {\n    "the private registry"\n}\n',
    }
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, text in files.items():
            content = text.encode()
            info = tarfile.TarInfo(f"{CRATE}-{VERSION}/{name}")
            info.size, info.mtime, info.mode = len(content), 0, 0o644
            tar.addfile(info, io.BytesIO(content))
    return gzip.compress(archive.getvalue(), mtime=0)


def index_path(name: str) -> str:
    """Where the sparse index keeps a crate's file (cargo's layout: 1/, 2/, 3/a/, ab/cd/)."""
    name = name.lower()
    if len(name) <= 2:
        return f"{len(name)}/{name}"
    if len(name) == 3:
        return f"3/{name[0]}/{name}"
    return f"{name[:2]}/{name[2:4]}/{name}"


class CargoRegistryServer(TokenServer):
    def __init__(self, idp, tls=True):
        self.crate = crate_archive()
        self.authorizations: list[str] = []
        self.served: list[str] = []
        super().__init__(idp, git_root=None, tls=tls)
        self.index = f"{self.url}/index/"
        self.config = json.dumps({"dl": f"{self.url}/dl/{{crate}}/{{version}}/download", "api": self.url,
                                  "auth-required": True}).encode()
        self.entry = json.dumps({"name": CRATE, "vers": VERSION, "deps": [], "features": {}, "yanked": False,
                                 "cksum": hashlib.sha256(self.crate).hexdigest()}).encode() + b"\n"

    def _handler(self):
        base = super()._handler()
        server = self

        class Handler(base):
            def handle_any(self):
                authorization = self.headers.get("Authorization", "")
                if authorization:
                    server.authorizations.append(authorization)
                token = authorization[7:] if authorization.startswith("Bearer ") else None
                if token:
                    server.seen.append(token)
                if not token or server.active(token) is None:
                    server.refused += 1
                    return self.answer(401, b'{"errors": [{"detail": "no active token"}]}', "application/json",
                                       {"WWW-Authenticate": "Cargo"})
                path = self.path.split("?")[0]
                documents = {
                    "/index/config.json": (server.config, "application/json"),
                    f"/index/{index_path(CRATE)}": (server.entry, "text/plain"),
                    f"/dl/{CRATE}/{VERSION}/download": (server.crate, "application/x-tar"),
                }
                if path not in documents:
                    return self.answer(404, b'{"errors": [{"detail": "not found"}]}', "application/json")
                server.served.append(path)
                self.answer(200, *documents[path])

            do_GET = handle_any

        return Handler
