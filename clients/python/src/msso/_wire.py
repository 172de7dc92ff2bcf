"""What the blocking and the asyncio clients share: the socket's address, frames, the values the
methods take and return (docs/PROTOCOL.md), and each verb's arguments, built in one place."""
from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import socket
import struct
import sys
from dataclasses import dataclass, field
from typing import IO, Any, Iterable, Literal, Mapping, NotRequired, TypedDict

from .errors import BrokerUnreachable, Internal, MSSOError, error_for

# BEGIN GENERATED constants: by scripts/generate-names from protocol/names.json; do not edit
# The version of the protocol this code speaks: a client names it in `hello`, and a daemon refuses a
# version it does not speak (UnsupportedVersion).
PROTOCOL_VERSION = 1
# The largest payload of one frame, in bytes, in both directions (the 4-byte length prefix not
# counted): far above any real message. A frame announcing more ends the connection before any of it
# is read.
MAX_FRAME = 65536
# END GENERATED constants
MAX_SERIAL = 0xFFFFFFFF     # serials are 1 ... 2^32 - 1; 0 means "not an answer to a call"
# What a broker can make a client hold, as libmsso (clients/c) bounds it: no reply of the protocol
# nests deeper than a few levels; signals are kept only for a client that subscribed, at most
# MAX_EVENTS unread and MAX_EVENT_BYTES of their frames (else 4,096 frames of 64 KiB: 256 MiB),
# past which the connection is closed, as the daemon closes a subscriber that stops reading.
MAX_DEPTH = 32
MAX_EVENTS = 4096
MAX_EVENT_BYTES = 1 << 20
PROMPTS_KEPT = 4            # a login's prompts not yet shown (the daemon sends one): the newest
DEFAULT_TIMEOUT = 20.0      # seconds a call may take (the Swift client's default); logins with a prompt wait as long as the daemon does
SLOW_TIMEOUT = 90.0         # lock and unlock: a wrong passphrase is answered up to 60 s late
# BEGIN GENERATED prompts: by scripts/generate-names from protocol/names.json; do not edit
# The signals a login's caller gets (its prompts), rather than a group's subscribers.
PROMPTS = ("DevicePrompt", "BrowserPrompt")
# END GENERATED prompts

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


def default_account() -> str | None:
    """$MSSO_ACCOUNT (the account a terminal works as, as the msso command reads it), else None:
    the account the daemon chooses (the registration's, else the group's default)."""
    return os.environ.get("MSSO_ACCOUNT") or None


def default_label() -> str:
    """`client` in hello: a label for the daemon's log, never trusted for identity."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"msso.py ({program})"


# -- values ----------------------------------------------------------------------------------------
# TypedDicts: the JSON objects as the daemon sends them (camelCase keys, unknown keys kept).

# BEGIN GENERATED states: by scripts/generate-names from protocol/names.json; do not edit
# A session's state (SessionStatus's `state`).
SessionState = Literal["valid", "expired", "notLoggedIn", "corrupt"]
# END GENERATED states


class SessionStatus(TypedDict):
    group: str
    # Which of the group's accounts ("default" for the one a login names none), and whether it is
    # the one a call naming no account gets.
    account: NotRequired[str]
    isDefault: NotRequired[bool]
    state: SessionState
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
    account: NotRequired[str]
    reason: str
    accessTokenExpiresAt: NotRequired[float]
    refreshToken: bool


class AccountName(TypedDict):
    """One session of a group: the group, and which of its accounts."""
    group: str
    account: str


class LogoutResult(TypedDict):
    loggedOut: list[str]                           # the groups, once each
    sessions: NotRequired[list[AccountName]]       # each session ended: its group and account
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


class Broken(Exception):
    """Something the broker sent that is not the protocol (the text says what). The client closes
    the connection (the stream can no longer be trusted) and raises Internal naming it."""


def check_event_room(count: int, queued_bytes: int, size: int) -> None:
    """Raises when one more signal of `size` bytes would pass the unread events' bounds (the
    client closes the connection then, as libmsso does)."""
    if count >= MAX_EVENTS or queued_bytes + size > MAX_EVENT_BYTES:
        raise BrokerUnreachable(f"more than {MAX_EVENTS} events (or {MAX_EVENT_BYTES // 1024} KiB of "
                                "them) were left unread: the connection was closed; read them as they come "
                                "(next_event), and subscribe again")


def broken_error(what: str, path: str) -> Internal:
    return Internal(f"the msso broker at {path} sent {what}: not the protocol (docs/PROTOCOL.md); "
                    "is the real mssod listening there?")


class Frames:
    """Cuts the byte stream into messages, each with its frame's length. A partial frame waits in
    the buffer for the rest. A frame that is not the protocol ends the feed: `broken` says why."""

    def __init__(self) -> None:
        self._buffer = b""
        self.broken: Broken | None = None

    def feed(self, data: bytes) -> list[tuple[int, dict]]:
        if not self._buffer and len(data) >= 4 and int.from_bytes(data[:4], "big") == len(data) - 4 <= MAX_FRAME:
            try:   # the usual read: one whole frame
                message = decode(data[4:])
            except Broken as broken:
                self.broken = broken
                return []
            return [] if message is None else [(len(data) - 4, message)]
        buffer = self._buffer + data if self._buffer else data
        messages, at, end = [], 0, len(buffer)
        try:
            while end - at >= 4:
                length = int.from_bytes(buffer[at:at + 4], "big")
                if length > MAX_FRAME:
                    raise Broken(f"a frame of {length} bytes, over the protocol's {MAX_FRAME}")
                if end - at - 4 < length:
                    break
                message = decode(buffer[at + 4:at + 4 + length])
                if message is not None:
                    messages.append((length, message))
                at += 4 + length
        except Broken as broken:
            self.broken, at = broken, end
        self._buffer = buffer[at:]
        return messages


def _no_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


_decoder = json.JSONDecoder(parse_constant=_no_constant)   # NaN and Infinity: Python's, not JSON's
_INSIDE_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_EMPTY_PAIRS = re.compile(r"\[\]|\{\}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _depth_over(text: str, limit: int) -> bool:
    """Whether JSON text nests deeper than `limit` levels: its brackets outside strings, the
    innermost empty pairs taken away once per level (each pass in C, not a Python loop per byte)."""
    brackets = re.sub(r"[^\[\]{}]", "", _INSIDE_STRINGS.sub("", text))
    for _ in range(limit):
        brackets, taken = _EMPTY_PAIRS.subn("", brackets)
        if not brackets or not taken:
            return False   # (unbalanced: the parser says so)
    return bool(brackets)


def _bad_string(value: Any) -> bool:
    """Whether a string in this value (keys included) holds a NUL or a lone surrogate (an escape
    such as \\ud800 that JSON allows and no UTF-8 string holds): libmsso refuses both."""
    if type(value) is str:
        return "\0" in value or _SURROGATE.search(value) is not None
    if type(value) is dict:
        return any(_bad_string(key) or _bad_string(item) for key, item in value.items())
    if type(value) is list:
        return any(_bad_string(item) for item in value)
    return False


def _serial(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_SERIAL


def decode(payload: bytes) -> dict | None:
    """One frame's message, checked as far as every message goes (docs/PROTOCOL.md, Messages): its
    type, serial, and the error's name and sentence or the signal's name and group. None for a
    type of a newer protocol (ignored, like unknown keys); Broken for anything else. The checks
    that cost more than a look run only when a cheap look finds their cause may be there."""
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        raise Broken("a frame that is not UTF-8") from None
    if payload.count(b"[") + payload.count(b"{") > MAX_DEPTH and _depth_over(text, MAX_DEPTH):
        raise Broken(f"a frame nested more than {MAX_DEPTH} levels deep")
    try:
        message, end = _decoder.raw_decode(text)   # what the daemon writes: no space around it
        if end != len(text):
            raise ValueError("more after the object")
    except ValueError:
        try:
            message = _decoder.decode(text)         # any other JSON, or the error
        except ValueError:
            raise Broken("a frame that is not JSON") from None
    if type(message) is not dict:
        raise Broken("a frame that is not a JSON object")
    if b"\\" in payload and b"\\u" in payload and _bad_string(message):   # (one byte first, by memchr: most frames have no escape)
        raise Broken("a string with a NUL or a lone surrogate in it")
    kind = message.get("type")
    if kind == "reply" or kind == "error":
        serial = message.get("serial")
        if type(serial) is not int or not 0 <= serial <= MAX_SERIAL:
            raise Broken(f"{'a reply' if kind == 'reply' else 'an error'} without a serial from 0 to {MAX_SERIAL}")
        if kind == "reply":
            if "result" not in message:
                raise Broken("a reply without a result")
        elif type(message.get("error")) is not str or type(message.get("message")) is not str:
            raise Broken("an error without a name or a message")
    elif type(kind) is not str:
        raise Broken("a message without a type")
    elif kind == "signal":
        if type(message.get("signal")) is not str or type(message.get("group")) is not str:
            raise Broken("a signal without a name or a group")
        if message["signal"] in PROMPTS and not _serial(message.get("serial")):
            raise Broken(f"a {message['signal']} without its login's serial")
    else:
        return None   # the daemon never calls clients; a newer protocol's type is ignored
    return message


def result_of(message: dict) -> Any:
    """A reply's result, or the error it carries raised."""
    if message["type"] == "error":
        raise error_for(message["error"], message["message"])
    return message["result"]


def stray_error(message: dict) -> MSSOError | None:
    """An error with serial 0 (why the daemon is about to close the connection), else None."""
    if message["type"] == "error" and message["serial"] == 0:
        return error_for(message["error"], message["message"])
    return None


# -- each verb's result ------------------------------------------------------------------------------
# Each takes a reply's result and returns what the verb returns, or raises Broken naming the field
# that is not what the protocol says (the types every library holds the daemon's values to:
# libmsso's readers). The objects are the daemon's own, unknown keys kept; a null is an absent key.

STRING, NUMBER, BOOL, OBJECT, LIST = "a string", "a finite number", "true or false", "an object", "a list"
_TYPES: dict[str, tuple[type, ...]] = {STRING: (str,), NUMBER: (int, float), BOOL: (bool,), OBJECT: (dict,),
                                       LIST: (list,)}


def _object(value: Any, where: str) -> dict:
    if type(value) is not dict:
        raise Broken(f"`{where}` is not an object")
    return value


def _field(value: dict, key: str, kind: str, where: str, required: bool = True) -> Any:
    item = value.get(key)
    if item is None:
        if required:
            raise Broken(f"`{where}.{key}` is missing")
        value.pop(key, None)
        return None
    if type(item) not in _TYPES[kind] or (kind is NUMBER and not math.isfinite(item)):
        raise Broken(f"`{where}.{key}` is not {kind}")
    return item


def _strings(value: dict, key: str, where: str) -> list[str]:
    items = _field(value, key, LIST, where)
    for index, item in enumerate(items):
        if type(item) is not str:
            raise Broken(f"`{where}.{key}[{index}]` is not a string")
    return items


def _unsigned(value: dict, key: str, where: str) -> int:
    item = value.get(key)
    if type(item) is not int or not 0 <= item <= MAX_SERIAL:
        raise Broken(f"`{where}.{key}` is not a whole number from 0 to {MAX_SERIAL}")
    return item


def session_of(value: Any, where: str = "result") -> SessionStatus:
    _object(value, where)
    for key in ("group", "state"):
        _field(value, key, STRING, where)
    for key in ("account", "issuer", "username"):
        _field(value, key, STRING, where, required=False)
    for key in ("loggedInAt", "sessionExpiresAt", "sessionMaxAt", "accessTokenExpiresAt"):
        _field(value, key, NUMBER, where, required=False)
    for key in ("isDefault", "admin", "locked"):
        _field(value, key, BOOL, where, required=False)
    return value  # type: ignore[return-value]


def status_of(result: Any) -> list[SessionStatus]:
    _object(result, "result")
    groups = _field(result, "groups", LIST, "result")
    for index, session in enumerate(groups):
        session_of(session, f"result.groups[{index}]")
    _field(result, "locked", BOOL, "result", required=False)
    _field(result, "lockedAt", NUMBER, "result", required=False)
    _field(result, "store", OBJECT, "result", required=False)
    return groups


def hello_of(result: Any) -> dict:
    _object(result, "result")
    _unsigned(result, "version", "result")
    _field(result, "daemon", STRING, "result")
    peer = _field(result, "peer", OBJECT, "result")
    _unsigned(peer, "uid", "result.peer")
    _unsigned(peer, "pid", "result.peer")
    _field(peer, "executable", STRING, "result.peer", required=False)
    return result


def ping_of(result: Any) -> str:
    return _field(_object(result, "result"), "data", STRING, "result")


def headers_of(result: Any) -> Headers:
    pairs = result.get("headers") if type(result) is dict else None   # (sign's hot path: no helper)
    if type(pairs) is not list:
        pairs = _field(_object(result, "result"), "headers", LIST, "result")
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str or type(pair[1]) is not str:
            raise Broken(f"`result.headers[{pairs.index(pair)}]` is not a pair of strings")
    return Headers(map(tuple, pairs))


def token_of(result: Any) -> Token:
    _object(result, "result")
    return Token(_field(result, "accessToken", STRING, "result"), _field(result, "expiresAt", NUMBER, "result"),
                 _field(result, "header", STRING, "result"))


def logout_of(result: Any) -> LogoutResult:
    _object(result, "result")
    _strings(result, "loggedOut", "result")
    _field(result, "revoked", BOOL, "result", required=False)
    for index, ended in enumerate(_field(result, "sessions", LIST, "result", required=False) or []):
        where = f"result.sessions[{index}]"
        _object(ended, where)
        _field(ended, "group", STRING, where)
        _field(ended, "account", STRING, where)
    for index, kept in enumerate(_field(result, "notRevoked", LIST, "result", required=False) or []):
        where = f"result.notRevoked[{index}]"
        _object(kept, where)
        _field(kept, "group", STRING, where)
        _field(kept, "account", STRING, where, required=False)
        _field(kept, "reason", STRING, where)
        _field(kept, "accessTokenExpiresAt", NUMBER, where, required=False)
        _field(kept, "refreshToken", BOOL, where)
    return result  # type: ignore[return-value]


def groups_of(result: Any) -> list[str]:
    return _strings(_object(result, "result"), "groups", "result")


def lock_of(result: Any) -> LockState:
    _object(result, "result")
    _field(result, "locked", BOOL, "result")
    _field(result, "lockedAt", NUMBER, "result", required=False)
    return result  # type: ignore[return-value]


def key_of(result: Any) -> KeyDescription:
    _object(result, "result")
    for key in ("group", "kind", "keyID", "pem"):
        _field(result, key, STRING, "result")
    _field(result, "jwk", OBJECT, "result")
    return result  # type: ignore[return-value]


def entries_of(result: Any) -> list[AuditEntry]:
    entries = _field(_object(result, "result"), "entries", LIST, "result")
    for index, entry in enumerate(entries):
        where = f"result.entries[{index}]"
        _object(entry, where)
        _field(entry, "time", NUMBER, where)
        _unsigned(entry, "uid", where)
        _unsigned(entry, "pid", where)
        for key in ("verb", "outcome"):
            _field(entry, key, STRING, where)
        for key in ("executable", "app", "group", "error"):
            _field(entry, key, STRING, where, required=False)
    return entries


def object_of(result: Any) -> dict:
    return _object(result, "result")


def prompt_of(message: dict) -> dict:
    """A DevicePrompt's `prompt` or a BrowserPrompt's `browser`, for the login's callback."""
    if message["signal"] == "DevicePrompt":
        prompt = _object(message.get("prompt"), "prompt")
        for key in ("verificationURI", "userCode"):
            _field(prompt, key, STRING, "prompt")
        _field(prompt, "verificationURIComplete", STRING, "prompt", required=False)
        where = "prompt"
    else:
        prompt = _object(message.get("browser"), "browser")
        _field(prompt, "url", STRING, "browser")
        where = "browser"
    _field(prompt, "expiresAt", NUMBER, where)
    _field(message, "joined", BOOL, "signal", required=False)
    return prompt


def signal_of(message: dict) -> Signal:
    """A group's signal; a status that is not an object is taken as none, as libmsso does."""
    status = message.get("status")
    if type(status) is dict:
        session_of(status, "status")
    else:
        status = None
    return Signal(message["signal"], message["group"], status, message)  # type: ignore[arg-type]


# -- each verb's arguments ---------------------------------------------------------------------------

def with_group(args: dict[str, Any], group: str | None, account: str | None = None) -> dict[str, Any]:
    if group is not None:
        args["group"] = group
    if account is not None:
        args["account"] = account
    return args


def body_digest(body: bytes | str | None) -> str | None:
    """bodySHA256: the body's SHA-256, standard base64 with padding. No body, or an empty one: none."""
    if not body:
        return None
    if isinstance(body, str):
        body = body.encode()
    return base64.b64encode(hashlib.sha256(body).digest()).decode("ascii")


def sign_args(method: str, url: str, headers: Iterable[tuple[str, str]] | Mapping[str, str] | None,
              body: bytes | str | None, group: str | None, dpop_nonce: str | None,
              account: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"method": method, "url": url}
    if headers:
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        args["headers"] = [[name, value] for name, value in pairs]
    digest = body_digest(body)
    if digest is not None:
        args["bodySHA256"] = digest
    if dpop_nonce is not None:
        args["dpopNonce"] = dpop_nonce
    return with_group(args, group, account)


def read_password(password: str | IO[str]) -> str:
    """A password given as a string, or as a file to read one line from (like --password-stdin)."""
    if isinstance(password, str):
        return password
    return password.readline().rstrip("\r\n")


def password_login_args(username: str, password: str | IO[str], group: str | None,
                        account: str | None = None) -> dict[str, Any]:
    return with_group({"flow": "password", "username": username, "password": read_password(password)}, group, account)


def logout_args(group: str | None, all: bool, account: str | None = None) -> dict[str, Any]:
    """`account`: the one the call named, else the client's; every account ends with `all`."""
    if all and group is not None:
        raise ValueError("logout: give a group or all=True, not both")
    return {"all": True} if all else with_group({}, group, account)


def token_args(group: str | None, renew: bool, resource: str | None, account: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = with_group({}, group, account)
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


def subscribe_args(groups: Iterable[str] | None, account: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {} if groups is None else {"groups": list(groups)}
    if account is not None:
        args["account"] = account
    return args


def print_device_prompt(prompt: DevicePrompt) -> None:
    uri = prompt.get("verificationURIComplete") or prompt.get("verificationURI")
    print(f"To log in, open {uri} and enter the code {prompt.get('userCode')}", file=sys.stderr, flush=True)


def open_browser_prompt(prompt: BrowserPrompt) -> None:
    import webbrowser
    print(f"To log in, open {prompt.get('url')} in a browser on this machine", file=sys.stderr, flush=True)
    webbrowser.open(prompt["url"])
