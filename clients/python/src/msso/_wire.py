"""What the blocking and the asyncio clients share: the socket's address, frames, the values the
methods take and return (docs/PROTOCOL.md), and each verb's arguments, built in one place."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import sys
from dataclasses import dataclass, field
from typing import IO, Any, Iterable, Literal, Mapping, NotRequired, TypedDict

from .errors import BrokerUnreachable, Internal, MSSOError, error_for

PROTOCOL_VERSION = 1
MAX_FRAME = 65536           # payload cap, both directions
MAX_SERIAL = 0xFFFFFFFF     # serials are 1 ... 2^32 - 1; 0 means "not an answer to a call"
DEFAULT_TIMEOUT = 20.0      # seconds a call may take (the Swift client's default); logins with a prompt wait as long as the daemon does
SLOW_TIMEOUT = 90.0         # lock and unlock: a wrong passphrase is answered up to 60 s late
PROMPTS = ("DevicePrompt", "BrowserPrompt")

# Request headers a signing profile can cover (RFC 9421 profiles: content-type, content-digest);
# the Auth classes pass only these to `sign`, so cookies and the like never cross the socket.
COVERABLE_HEADERS = frozenset({"content-type", "content-digest"})


def default_socket_path() -> str:
    """$MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock, else /run/user/UID/msso/broker.sock."""
    if os.environ.get("MSSO_SOCKET"):
        return os.environ["MSSO_SOCKET"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "msso", "broker.sock")
    return f"/run/user/{os.getuid()}/msso/broker.sock"


def _initial_user_namespace() -> bool:
    """Whether this process is in the machine's own user namespace: root's exemption is the real
    root's, not that of a user in a namespace of their own (`unshare -r`)."""
    try:
        with open("/proc/self/uid_map") as uid_map:
            return uid_map.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def check_peer(sock: socket.socket, path: str) -> None:
    """The process listening must be this user's (or we are root, who may address any user's
    broker): a socket another user planted would read the calls, a login's password among them."""
    try:
        _, uid, _ = struct.unpack("iII", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII")))
    except OSError:
        uid = None
    if uid is None or (uid != os.geteuid() and not (os.geteuid() == 0 and _initial_user_namespace())):
        raise BrokerUnreachable(f"the msso broker at {path} runs as another user (uid {'unknown' if uid is None else uid}): "
                                "not talking to it; check MSSO_SOCKET and XDG_RUNTIME_DIR")


def default_label() -> str:
    """`client` in hello: a label for the daemon's log, never trusted for identity."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"msso.py ({program})"


# -- values ----------------------------------------------------------------------------------------
# TypedDicts: the JSON objects as the daemon sends them (camelCase keys, unknown keys kept).

class SessionStatus(TypedDict):
    group: str
    state: Literal["valid", "expired", "notLoggedIn", "corrupt"]
    issuer: NotRequired[str]
    username: NotRequired[str]
    loggedInAt: NotRequired[float]
    sessionExpiresAt: NotRequired[float]
    sessionMaxAt: NotRequired[float]
    accessTokenExpiresAt: NotRequired[float]
    admin: NotRequired[bool]
    locked: NotRequired[bool]
    # In a login's answer and its LoggedIn event only: the login made its account the group's (the
    # group's first, or a change asked for with `msso login --new-account`), in place of
    # previousAccount when the group had one.
    newAccount: NotRequired[bool]
    previousAccount: NotRequired[str]


class NotRevoked(TypedDict):
    group: str
    reason: str
    accessTokenExpiresAt: NotRequired[float]
    refreshToken: bool


class LogoutResult(TypedDict):
    loggedOut: list[str]
    revoked: NotRequired[bool]
    notRevoked: NotRequired[list[NotRevoked]]


class LockState(TypedDict):
    locked: bool
    lockedAt: NotRequired[float]


class KeyDescription(TypedDict):
    group: str
    kind: Literal["p-256", "ed25519"]
    keyID: str
    jwk: dict[str, str]
    pem: str


class DevicePrompt(TypedDict):
    verificationURI: str
    verificationURIComplete: NotRequired[str]
    userCode: str
    expiresAt: float


class BrowserPrompt(TypedDict):
    url: str
    expiresAt: float


class AuditEntry(TypedDict):
    time: float
    uid: int
    pid: int
    executable: NotRequired[str]
    app: NotRequired[str]
    group: NotRequired[str]
    verb: str
    outcome: Literal["ok", "error"]
    error: NotRequired[str]


class Headers(list[tuple[str, str]]):
    """The headers `sign` returns, as (name, value) pairs in order: add them to the request.

    Its repr shows the names only, since the values carry the token."""

    def __repr__(self) -> str:
        return f"Headers({[name for name, _ in self]!r})"


@dataclass(frozen=True)
class Token:
    """The access token itself (`token`), for a program that cannot have each request signed.

    `header` is "Bearer" (send `Authorization: Bearer TOKEN`) or the header name of a
    `header:NAME` profile. The repr leaves the token out."""
    access_token: str = field(repr=False)
    expires_at: float
    header: str

    def as_header(self) -> tuple[str, str]:
        """The (name, value) header that carries the token."""
        if self.header == "Bearer":
            return ("Authorization", f"Bearer {self.access_token}")
        return (self.header, self.access_token)


@dataclass(frozen=True)
class Signal:
    """A signal from the broker: LoggedIn, Extended, LoggedOut, Expiring or Expired, with the group
    and its SessionStatus after the event."""
    name: str
    group: str | None
    status: SessionStatus | None
    raw: dict = field(repr=False, compare=False)


# -- frames ----------------------------------------------------------------------------------------

def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


try:
    from json.encoder import c_make_encoder, encode_basestring_ascii
except ImportError:   # a Python without json's C accelerator
    c_make_encoder = None
# json.dumps makes a new encoder for every call; a call's frame is the hot path, so it keeps one:
# the same C encoder with json.dumps's settings (the same output), less a third of the work.
_encoder = c_make_encoder and c_make_encoder(None, _not_json, encode_basestring_ascii, None, ": ", ", ", False, False, True)


def frame(serial: int, method: str, args: Mapping[str, Any]) -> bytes:
    """A call's frame."""
    message = {"type": "call", "serial": serial, "method": method, "args": args}
    payload = ("".join(_encoder(message, 0)) if _encoder else json.dumps(message)).encode()
    if len(payload) > MAX_FRAME:
        # The daemon would close the connection; say so here, without the arguments (a password?).
        raise error_for("BadRequest", f"the {method} call is {len(payload)} bytes; the protocol's limit is {MAX_FRAME}")
    return len(payload).to_bytes(4, "big") + payload


class Frames:
    """Cuts the byte stream into messages. A partial frame waits in the buffer for the rest."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[dict]:
        if not self._buffer and len(data) >= 4 and int.from_bytes(data[:4], "big") == len(data) - 4:
            message = decode(data[4:])   # the usual read: one whole frame
            return [] if message is None else [message]
        buffer = self._buffer + data if self._buffer else data
        messages, at, end = [], 0, len(buffer)
        while end - at >= 4:
            length = int.from_bytes(buffer[at:at + 4], "big")
            if length > MAX_FRAME:
                raise Internal(f"the broker sent a frame of {length} bytes, over the protocol's limit")
            if end - at - 4 < length:
                break
            messages.append(decode(buffer[at + 4:at + 4 + length]))
            at += 4 + length
        self._buffer = buffer[at:]
        return [message for message in messages if message is not None]


_decoder = json.JSONDecoder()


def decode(payload: bytes) -> dict | None:
    """One frame's message; None for JSON that is not an object (ignored, like unknown keys)."""
    try:
        text = payload.decode()
        try:
            message, end = _decoder.raw_decode(text)   # what the daemon writes: no space around it
            if end != len(text):
                raise ValueError("more after the object")
        except ValueError:
            message = json.loads(text)                 # any other JSON, or the error
    except ValueError:  # UnicodeDecodeError included
        raise Internal("the broker sent a frame that is not UTF-8 JSON") from None
    return message if isinstance(message, dict) else None


def result_of(message: dict) -> Any:
    """A reply's result, or the error it carries raised."""
    if message.get("type") == "error":
        raise error_for(message.get("error"), message.get("message"))
    if "result" not in message:
        raise Internal("the broker's reply had no result")
    return message["result"]


def signal_of(message: dict) -> Signal:
    return Signal(str(message.get("signal", "")), message.get("group"), message.get("status"), message)


def stray_error(message: dict) -> MSSOError | None:
    """An error with serial 0 (why the daemon is about to close the connection), else None."""
    if message.get("type") == "error" and message.get("serial") == 0:
        return error_for(message.get("error"), message.get("message"))
    return None


# -- each verb's arguments ---------------------------------------------------------------------------

def with_group(args: dict[str, Any], group: str | None) -> dict[str, Any]:
    if group is not None:
        args["group"] = group
    return args


def body_digest(body: bytes | str | None) -> str | None:
    """bodySHA256: the body's SHA-256, standard base64 with padding. No body, or an empty one: none."""
    if not body:
        return None
    if isinstance(body, str):
        body = body.encode()
    return base64.b64encode(hashlib.sha256(body).digest()).decode("ascii")


def sign_args(method: str, url: str, headers: Iterable[tuple[str, str]] | Mapping[str, str] | None,
              body: bytes | str | None, group: str | None, dpop_nonce: str | None) -> dict[str, Any]:
    args: dict[str, Any] = {"method": method, "url": url}
    if headers:
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        args["headers"] = [[name, value] for name, value in pairs]
    digest = body_digest(body)
    if digest is not None:
        args["bodySHA256"] = digest
    if dpop_nonce is not None:
        args["dpopNonce"] = dpop_nonce
    return with_group(args, group)


def headers_of(result: dict) -> Headers:
    return Headers(map(tuple, result["headers"]))


def token_of(result: dict) -> Token:
    return Token(result["accessToken"], result["expiresAt"], result["header"])


def read_password(password: str | IO[str]) -> str:
    """A password given as a string, or as a file to read one line from (like --password-stdin)."""
    if isinstance(password, str):
        return password
    return password.readline().rstrip("\r\n")


def password_login_args(username: str, password: str | IO[str], group: str | None) -> dict[str, Any]:
    return with_group({"flow": "password", "username": username, "password": read_password(password)}, group)


def logout_args(group: str | None, all: bool) -> dict[str, Any]:
    if all and group is not None:
        raise ValueError("logout: give a group or all=True, not both")
    return {"all": True} if all else with_group({}, group)


def token_args(group: str | None, renew: bool, resource: str | None) -> dict[str, Any]:
    args: dict[str, Any] = with_group({}, group)
    if renew:
        args["renew"] = True
    if resource is not None:
        args["resource"] = resource
    return args


def keys_args(group: str | None, rotate: bool) -> dict[str, Any]:
    return with_group({"rotate": True} if rotate else {}, group)


def audit_args(group: str | None, since: float | None, limit: int | None) -> dict[str, Any]:
    args: dict[str, Any] = with_group({}, group)
    if since is not None:
        args["since"] = since
    if limit is not None:
        args["limit"] = limit
    return args


def subscribe_args(groups: Iterable[str] | None) -> dict[str, Any]:
    return {} if groups is None else {"groups": list(groups)}


def print_device_prompt(prompt: DevicePrompt) -> None:
    uri = prompt.get("verificationURIComplete") or prompt.get("verificationURI")
    print(f"To log in, open {uri} and enter the code {prompt.get('userCode')}", file=sys.stderr, flush=True)


def open_browser_prompt(prompt: BrowserPrompt) -> None:
    import webbrowser
    print(f"To log in, open {prompt.get('url')} in a browser on this machine", file=sys.stderr, flush=True)
    webbrowser.open(prompt["url"])
