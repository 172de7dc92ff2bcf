"""The asyncio client: the verbs of msso.Client, awaitable.

    import msso.aio

    async with msso.aio.Client() as broker:
        headers = await broker.sign("GET", "https://api.example.com/items")
        async for event in await broker.events():
            ...

One connection, read by a task of its own that hands each reply to its call (by serial) and each
signal to `next_event`/`events`. Use a client from the event loop that opened it. What the broker
sends is held to the protocol as msso.Client holds it (Internal otherwise, and the connection
closed), and so are the signals kept (only once subscribed; at most 4,096 unread, 1 MiB of them).
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import os
from typing import IO, Any, AsyncIterator, Callable, Iterable, Mapping

from . import _wire
from ._wire import (AuditEntry, Broken, BrowserPrompt, DevicePrompt, Headers, KeyDescription, LockState, LogoutResult,
                    SessionStatus, Signal, Token)
from .errors import BrokerUnreachable, MSSOError, TimedOut

__all__ = ["Client", "connect"]

_DEFAULT: Any = object()


async def connect(socket_path: str | os.PathLike[str] | None = None, *, client: str | None = None,
                  timeout: float | None = _wire.DEFAULT_TIMEOUT, account: str | None = None) -> Client:
    """A Client with its connection open (hello answered): raises BrokerUnreachable at once if not."""
    broker = Client(socket_path, client=client, timeout=timeout, account=account)
    await broker.connect()
    return broker


class Client:
    """One connection to the user's msso broker, opened at the first call (or `connect()`, or
    `async with`). Like msso.Client: a lost connection is opened again by the next call, calls in
    flight fail with BrokerUnreachable, and so does `next_event` (subscribe again). `account`, and
    each verb's, as msso.Client's: by default $MSSO_ACCOUNT, else the daemon's choice."""

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *, client: str | None = None,
                 timeout: float | None = _wire.DEFAULT_TIMEOUT, account: str | None = None):
        self.socket_path = os.fspath(socket_path) if socket_path else _wire.default_socket_path()
        self.timeout = timeout
        self.account = account or _wire.default_account()
        self.label = client or _wire.default_label()
        self.daemon = ""
        self.peer: dict[str, Any] = {}
        self.version = _wire.PROTOCOL_VERSION
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._opening: asyncio.Lock | None = None
        self._serial = 0
        self._waiting: dict[int, tuple[asyncio.Future[dict], Callable[[Any], Any] | None]] = {}
        self._signals: collections.deque[tuple[Signal, int]] = collections.deque()   # each with its frame's length
        self._signal_bytes = 0
        self._signal_arrived = asyncio.Event()   # set when a signal comes or the signals end
        self._signals_ended: MSSOError | None = None
        self._subscribed = False
        self._subscribing: set[int] = set()      # subscribe calls waiting: their signals may come first
        self._ending: dict[asyncio.StreamWriter, MSSOError] = {}   # why this library closes a connection
        self._closed = False
        self._prompting: set[asyncio.Future[Any]] = set()   # coroutine prompt callbacks running

    # -- the verbs (as msso.Client's) -----------------------------------------------------------------

    async def ping(self, data: str = "") -> str:
        return await self._verb("ping", {"data": data}, _wire.ping_of)

    async def status(self, group: str | None = None, *, account: str | None = None) -> list[SessionStatus]:
        return await self._verb("status", _wire.with_group({}, group, account), _wire.status_of)

    async def check(self, group: str | None = None, *, account: str | None = None) -> SessionStatus:
        return await self._verb("check", _wire.with_group({}, group, self._account(account)), _wire.session_of)

    async def sign(self, method: str, url: str, headers: Iterable[tuple[str, str]] | Mapping[str, str] | None = None,
                   body: bytes | str | None = None, *, group: str | None = None, dpop_nonce: str | None = None,
                   account: str | None = None) -> Headers:
        return await self._verb("sign", _wire.sign_args(method, url, headers, body, group, dpop_nonce, self._account(account)),
                                _wire.headers_of)

    async def token(self, *, group: str | None = None, renew: bool = False, resource: str | None = None,
                    account: str | None = None) -> Token:
        return await self._verb("token", _wire.token_args(group, renew, resource, self._account(account)), _wire.token_of)

    async def login(self, username: str, password: str | IO[str], *, group: str | None = None,
                    account: str | None = None) -> SessionStatus:
        return await self._verb("login", _wire.password_login_args(username, password, group, self._account(account)),
                                _wire.session_of)

    async def login_device(self, on_prompt: Callable[[DevicePrompt], Any] = _wire.print_device_prompt, *,
                           group: str | None = None, timeout: float | None = None, account: str | None = None) -> SessionStatus:
        """`on_prompt` may be a plain function or a coroutine function."""
        return await self._verb("login", _wire.with_group({"flow": "device"}, group, self._account(account)), _wire.session_of,
                                timeout, on_prompt)

    async def login_browser(self, on_prompt: Callable[[BrowserPrompt], Any] = _wire.open_browser_prompt, *,
                            group: str | None = None, timeout: float | None = None, account: str | None = None) -> SessionStatus:
        return await self._verb("login", _wire.with_group({"flow": "browser"}, group, self._account(account)), _wire.session_of,
                                timeout, on_prompt)

    async def extend(self, group: str | None = None, *, account: str | None = None) -> SessionStatus:
        return await self._verb("extend", _wire.with_group({}, group, self._account(account)), _wire.session_of)

    async def logout(self, group: str | None = None, *, account: str | None = None, all: bool = False) -> LogoutResult:
        if all and account is not None:
            raise ValueError("logout: give an account or all=True, not both")
        return await self._verb("logout", _wire.logout_args(group, all, self._account(account)), _wire.logout_of)

    async def subscribe(self, groups: Iterable[str] | None = None, *, account: str | None = None) -> list[str]:
        return await self._verb("subscribe", _wire.subscribe_args(groups, self._account(account)), _wire.groups_of)

    async def next_event(self, timeout: float | None = None) -> Signal | None:
        """The next signal within `timeout` seconds (None: for ever); None on timeout.

        Raises BrokerUnreachable when the subscribed connection is lost or the client closed."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while not self._signals:
            if self._closed:
                raise BrokerUnreachable("this msso client was closed")
            if self._signals_ended is not None:
                raise self._signals_ended.copy()
            self._signal_arrived.clear()
            remaining = None if deadline is None else deadline - asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(self._signal_arrived.wait(), remaining)
            except TimeoutError:
                return None
        signal, size = self._signals.popleft()
        self._signal_bytes -= size
        return signal

    async def events(self, groups: Iterable[str] | None = None, *, account: str | None = None) -> AsyncIterator[Signal]:
        """Subscribes (now), then the signals as they come, until `close()`: `async for e in await c.events()`."""
        await self.subscribe(groups, account=account)

        async def stream() -> AsyncIterator[Signal]:
            while True:
                try:
                    event = await self.next_event()
                except BrokerUnreachable:
                    if self._closed:
                        return
                    raise
                if event is not None:
                    yield event
        return stream()

    async def keys(self, *, group: str | None = None, rotate: bool = False) -> KeyDescription:
        return await self._verb("keys", _wire.keys_args(group, rotate), _wire.key_of)

    async def apps(self) -> dict[str, Any]:
        return await self._verb("apps", {}, _wire.object_of)

    async def audit(self, *, group: str | None = None, since: float | None = None,
                    limit: int | None = None) -> list[AuditEntry]:
        return await self._verb("audit", _wire.audit_args(group, since, limit), _wire.entries_of)

    async def diagnose(self) -> dict[str, Any]:
        return await self._verb("diagnose", {}, _wire.object_of)

    async def lock(self, passphrase: str) -> LockState:
        return await self._verb("lock", {"passphrase": passphrase}, _wire.lock_of, self._slow_timeout())

    async def unlock(self, passphrase: str) -> LockState:
        return await self._verb("unlock", {"passphrase": passphrase}, _wire.lock_of, self._slow_timeout())

    def _slow_timeout(self) -> float | None:
        return None if self.timeout is None else max(self.timeout, _wire.SLOW_TIMEOUT)

    def _account(self, account: str | None) -> str | None:
        return account if account is not None else self.account

    async def connect(self) -> Client:
        """Opens the connection now (it is opened by the first call otherwise)."""
        await self._connected()
        return self

    async def close(self) -> None:
        self._closed = True
        writer, task = self._writer, self._reader_task
        self._writer = None
        self._fail_pending(BrokerUnreachable("this msso client was closed"))
        self._signal_arrived.set()
        if writer is not None:
            writer.close()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def __aenter__(self) -> Client:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<msso.aio.Client {self.socket_path!r}{' closed' if self._closed else ''}>"

    # -- calls and replies -----------------------------------------------------------------------------

    async def call(self, method: str, args: Mapping[str, Any], *, timeout: float | None = _DEFAULT,
                   on_prompt: Callable[[Any], Any] | None = None) -> Any:
        """Any method by name: the reply's `result`, or the error it carries raised."""
        return await self._verb(method, args, None, timeout, on_prompt)

    async def _verb(self, method: str, args: Mapping[str, Any], read: Callable[[Any], Any] | None,
                    timeout: float | None = _DEFAULT, on_prompt: Callable[[Any], Any] | None = None) -> Any:
        """A call whose result `read` checks and makes into what the verb returns."""
        if timeout is _DEFAULT:
            timeout = None if on_prompt else self.timeout
        try:
            return await self._call(await self._connected(), method, args, timeout, on_prompt, read)
        except TimedOut:
            # Closed for idleness before the daemon read this call (not carried out): once more.
            return await self._call(await self._connected(), method, args, timeout, on_prompt, read)

    async def _call(self, writer: asyncio.StreamWriter, method: str, arguments: Mapping[str, Any], timeout: float | None,
                    on_prompt: Callable[[Any], Any] | None, read: Callable[[Any], Any] | None = None) -> Any:
        serial = self._next_serial()
        answer: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        self._waiting[serial] = (answer, on_prompt)
        if method == "subscribe":
            self._subscribing.add(serial)
        try:
            if writer.is_closing():   # the connection ended since it was looked up
                raise _lost_connection()
            writer.write(_wire.frame(serial, method, arguments))
            if writer.transport.get_write_buffer_size() > 65536:
                await writer.drain()   # the daemon reads slowly: wait for it rather than queue without end
            try:
                message = await asyncio.wait_for(answer, timeout)
            except TimeoutError:
                raise BrokerUnreachable(f"the msso broker did not answer {method} in time ({self.socket_path}); "
                                        "is mssod stuck? `systemctl --user restart msso.service`") from None
        except ConnectionError:
            raise _lost_connection() from None
        finally:
            self._waiting.pop(serial, None)
            self._subscribing.discard(serial)
        result = _wire.result_of(message)
        if read is None:
            return result
        try:
            return read(result)
        except Broken as broken:
            error = _wire.broken_error(f"an answer to {method} in which {broken}", self.socket_path)
            self._end(writer, error)
            raise error from None

    def _end(self, writer: asyncio.StreamWriter, reason: MSSOError) -> None:
        """This library closes the connection (the broker broke the protocol): its calls fail with
        `reason`, its subscription ends, and the next call opens another."""
        if self._writer is not writer:
            return   # ended or replaced already (or still saying hello: _open closes it)
        self._writer = None
        self._ending[writer] = reason
        writer.close()
        self._ended(reason)

    def _ended(self, reason: MSSOError) -> None:
        self._fail_pending(reason)
        self._subscribing.clear()
        if self._subscribed:
            self._subscribed, self._signals_ended = False, reason
        self._signal_arrived.set()

    def _next_serial(self) -> int:
        while True:
            self._serial = self._serial % _wire.MAX_SERIAL + 1
            if self._serial not in self._waiting:
                return self._serial

    async def _connected(self) -> asyncio.StreamWriter:
        if self._closed:
            raise BrokerUnreachable("this msso client was closed")
        if self._writer is not None:
            return self._writer
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:   # one connect at a time; the others then find it open
            if self._writer is None:
                await self._open()
            if self._writer is None:
                raise BrokerUnreachable("this msso client was closed")
            return self._writer

    async def _open(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(self.socket_path), self.timeout)
        except TimeoutError:
            raise BrokerUnreachable(f"the msso broker did not accept the connection in {self.timeout} s "
                                    f"({self.socket_path}); is mssod stuck? `systemctl --user restart msso.service`") from None
        except PermissionError:
            raise BrokerUnreachable(f"no permission to talk to the msso broker at {self.socket_path}: "
                                    "it is another user's") from None
        except OSError:
            raise BrokerUnreachable(f"the msso broker is not running (nothing answers on {self.socket_path}); "
                                    "start it with `systemctl --user start msso.socket` or `mssod`") from None
        try:
            _wire.check_peer(writer.get_extra_info("socket"), self.socket_path)
        except BrokerUnreachable:
            writer.close()
            raise
        task = asyncio.create_task(self._read(reader, writer))
        try:
            hello = await self._call(writer, "hello", {"version": _wire.PROTOCOL_VERSION, "client": self.label},
                                     self.timeout, None, _wire.hello_of)
        except BaseException:
            writer.close()
            await asyncio.gather(task, return_exceptions=True)
            raise
        if self._closed:   # closed while saying hello
            writer.close()
            return
        self._writer, self._reader_task = writer, task
        self.version, self.daemon, self.peer = hello["version"], hello["daemon"], hello["peer"]

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Hands every message to its call or to the signal queue, until the connection ends."""
        ended: MSSOError = _lost_connection()
        stray: MSSOError | None = None
        ours = False   # this library ends the connection (not the protocol; signals left unread)
        try:
            while True:
                length = int.from_bytes(await reader.readexactly(4), "big")
                if length > _wire.MAX_FRAME:
                    raise Broken(f"a frame of {length} bytes, over the protocol's {_wire.MAX_FRAME}")
                message = _wire.decode(await reader.readexactly(length))
                if message is not None:
                    stray = self._dispatch(length, message) or stray
        except Broken as broken:   # the stream can no longer be trusted
            ended, ours = _wire.broken_error(str(broken), self.socket_path), True
        except MSSOError as reason:
            ended, ours = reason, True
        except (asyncio.IncompleteReadError, OSError):
            pass
        writer.close()
        if self._ending.pop(writer, None) is not None:
            return   # _end saw to the rest
        if self._writer is writer or self._writer is None:
            if self._writer is writer:
                self._writer = None
            # What the daemon said before closing is the better reason, unless we closed it.
            self._ended(ended if ours else stray or ended)

    def _dispatch(self, size: int, message: dict) -> MSSOError | None:
        """Files one message (checked by _wire.decode); returns a serial-0 error (why the daemon
        will close the connection). Raises Broken, or the error to end the connection with."""
        kind = message["type"]
        if kind == "reply" or kind == "error":
            serial = message["serial"]
            waiter = self._waiting.get(serial)
            if waiter is not None and not waiter[0].done():
                waiter[0].set_result(message)
                if serial in self._subscribing:   # subscribed from here on in the stream
                    self._subscribing.discard(serial)
                    if kind == "reply":
                        self._subscribed, self._signals_ended = True, None
                return None
            return _wire.stray_error(message)
        if message["signal"] in _wire.PROMPTS:
            waiter = self._waiting.get(message["serial"])
            if waiter is not None and waiter[1] is not None:
                try:
                    prompt = _wire.prompt_of(message)
                except Broken as broken:
                    raise Broken(f"a {message['signal']} in which {broken}") from None
                self._prompt(waiter, prompt)
        elif self._subscribed or self._subscribing:
            _wire.check_event_room(len(self._signals), self._signal_bytes, size)
            try:
                signal = _wire.signal_of(message)
            except Broken as broken:
                raise Broken(f"a {message['signal']} signal in which {broken}") from None
            self._signals.append((signal, size))
            self._signal_bytes += size
            self._signal_arrived.set()
        # Signals nobody subscribed to are dropped: a broker that pushes them makes us hold nothing.
        return None

    def _prompt(self, waiter: tuple[asyncio.Future[dict], Callable[[Any], Any] | None], prompt: dict) -> None:
        answer, on_prompt = waiter

        def failed(error: BaseException) -> None:   # the login fails with the callback's error; the reader goes on
            if not answer.done():
                answer.set_exception(error)
        if len(self._prompting) >= _wire.PROMPTS_KEPT:
            return   # callbacks still showing the earlier prompts (the daemon sends one): dropped
        try:
            shown = on_prompt(prompt)  # type: ignore[misc]
        except Exception as error:
            return failed(error)
        if inspect.isawaitable(shown):   # a coroutine callback runs beside the reader, held until done
            task = asyncio.ensure_future(shown)
            self._prompting.add(task)
            task.add_done_callback(self._prompting.discard)
            task.add_done_callback(lambda done: done.cancelled() or done.exception() is None or failed(done.exception()))

    def _fail_pending(self, reason: MSSOError) -> None:
        for answer, _ in list(self._waiting.values()):
            if not answer.done():
                answer.set_exception(reason.copy())


def _lost_connection() -> BrokerUnreachable:
    return BrokerUnreachable("the connection to the msso broker was lost; is mssod still running?")
