"""The asyncio client: the verbs of msso.Client, awaitable.

    import msso.aio

    async with msso.aio.Client() as broker:
        headers = await broker.sign("GET", "https://api.example.com/items")
        async for event in await broker.events():
            ...

One connection, read by a task of its own that hands each reply to its call (by serial) and each
signal to `next_event`/`events`. Use a client from the event loop that opened it.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import os
from typing import IO, Any, AsyncIterator, Callable, Iterable, Mapping

from . import _wire
from ._wire import (AuditEntry, BrowserPrompt, DevicePrompt, Headers, KeyDescription, LockState, LogoutResult,
                    SessionStatus, Signal, Token)
from .errors import BrokerUnreachable, Internal, MSSOError, TimedOut

__all__ = ["Client", "connect"]

_DEFAULT: Any = object()


async def connect(socket_path: str | os.PathLike[str] | None = None, *, client: str | None = None,
                  timeout: float | None = _wire.DEFAULT_TIMEOUT) -> Client:
    """A Client with its connection open (hello answered): raises BrokerUnreachable at once if not."""
    broker = Client(socket_path, client=client, timeout=timeout)
    await broker.connect()
    return broker


class Client:
    """One connection to the user's msso broker, opened at the first call (or `connect()`, or
    `async with`). Like msso.Client: a lost connection is opened again by the next call, calls in
    flight fail with BrokerUnreachable, and so does `next_event` (subscribe again)."""

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *, client: str | None = None,
                 timeout: float | None = _wire.DEFAULT_TIMEOUT):
        self.socket_path = os.fspath(socket_path) if socket_path else _wire.default_socket_path()
        self.timeout = timeout
        self.label = client or _wire.default_label()
        self.daemon = ""
        self.peer: dict[str, Any] = {}
        self.version = _wire.PROTOCOL_VERSION
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._opening: asyncio.Lock | None = None
        self._serial = 0
        self._waiting: dict[int, tuple[asyncio.Future[dict], Callable[[Any], Any] | None]] = {}
        self._signals: collections.deque[Signal] = collections.deque()
        self._signal_arrived = asyncio.Event()   # set when a signal comes or the signals end
        self._signals_ended: MSSOError | None = None
        self._subscribed = False
        self._closed = False
        self._prompting: set[asyncio.Future[Any]] = set()   # coroutine prompt callbacks running

    # -- the verbs (as msso.Client's) -----------------------------------------------------------------

    async def ping(self, data: str = "") -> str:
        return (await self.call("ping", {"data": data}))["data"]

    async def status(self, group: str | None = None) -> list[SessionStatus]:
        return (await self.call("status", _wire.with_group({}, group)))["groups"]

    async def check(self, group: str | None = None) -> SessionStatus:
        return await self.call("check", _wire.with_group({}, group))

    async def sign(self, method: str, url: str, headers: Iterable[tuple[str, str]] | Mapping[str, str] | None = None,
                   body: bytes | str | None = None, *, group: str | None = None, dpop_nonce: str | None = None) -> Headers:
        return _wire.headers_of(await self.call("sign", _wire.sign_args(method, url, headers, body, group, dpop_nonce)))

    async def token(self, *, group: str | None = None, renew: bool = False, resource: str | None = None) -> Token:
        return _wire.token_of(await self.call("token", _wire.token_args(group, renew, resource)))

    async def login(self, username: str, password: str | IO[str], *, group: str | None = None) -> SessionStatus:
        return await self.call("login", _wire.password_login_args(username, password, group))

    async def login_device(self, on_prompt: Callable[[DevicePrompt], Any] = _wire.print_device_prompt, *,
                           group: str | None = None, timeout: float | None = None) -> SessionStatus:
        """`on_prompt` may be a plain function or a coroutine function."""
        return await self.call("login", _wire.with_group({"flow": "device"}, group), timeout=timeout, on_prompt=on_prompt)

    async def login_browser(self, on_prompt: Callable[[BrowserPrompt], Any] = _wire.open_browser_prompt, *,
                            group: str | None = None, timeout: float | None = None) -> SessionStatus:
        return await self.call("login", _wire.with_group({"flow": "browser"}, group), timeout=timeout, on_prompt=on_prompt)

    async def extend(self, group: str | None = None) -> SessionStatus:
        return await self.call("extend", _wire.with_group({}, group))

    async def logout(self, group: str | None = None, *, all: bool = False) -> LogoutResult:
        return await self.call("logout", _wire.logout_args(group, all))

    async def subscribe(self, groups: Iterable[str] | None = None) -> list[str]:
        result = (await self.call("subscribe", _wire.subscribe_args(groups)))["groups"]
        self._subscribed, self._signals_ended = True, None
        return result

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
        return self._signals.popleft()

    async def events(self, groups: Iterable[str] | None = None) -> AsyncIterator[Signal]:
        """Subscribes (now), then the signals as they come, until `close()`: `async for e in await c.events()`."""
        await self.subscribe(groups)

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
        return await self.call("keys", _wire.keys_args(group, rotate))

    async def apps(self) -> dict[str, Any]:
        return await self.call("apps", {})

    async def audit(self, *, group: str | None = None, since: float | None = None,
                    limit: int | None = None) -> list[AuditEntry]:
        return (await self.call("audit", _wire.audit_args(group, since, limit)))["entries"]

    async def diagnose(self) -> dict[str, Any]:
        return await self.call("diagnose", {})

    async def lock(self, passphrase: str) -> LockState:
        return await self.call("lock", {"passphrase": passphrase}, timeout=self._slow_timeout())

    async def unlock(self, passphrase: str) -> LockState:
        return await self.call("unlock", {"passphrase": passphrase}, timeout=self._slow_timeout())

    def _slow_timeout(self) -> float | None:
        return None if self.timeout is None else max(self.timeout, _wire.SLOW_TIMEOUT)

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
        if timeout is _DEFAULT:
            timeout = None if on_prompt else self.timeout
        try:
            return await self._call(await self._connected(), method, args, timeout, on_prompt)
        except TimedOut:
            # Closed for idleness before the daemon read this call (not carried out): once more.
            return await self._call(await self._connected(), method, args, timeout, on_prompt)

    async def _call(self, writer: asyncio.StreamWriter, method: str, arguments: Mapping[str, Any], timeout: float | None,
                    on_prompt: Callable[[Any], Any] | None) -> Any:
        serial = self._next_serial()
        answer: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        self._waiting[serial] = (answer, on_prompt)
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
        return _wire.result_of(message)

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
                                     self.timeout, None)
        except BaseException:
            writer.close()
            await asyncio.gather(task, return_exceptions=True)
            raise
        if self._closed:   # closed while saying hello
            writer.close()
            return
        self._writer, self._reader_task = writer, task
        self.version = hello.get("version", _wire.PROTOCOL_VERSION)
        self.daemon = hello.get("daemon", "")
        self.peer = hello.get("peer", {})

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Hands every message to its call or to the signal queue, until the connection ends."""
        ended: MSSOError = _lost_connection()
        stray: MSSOError | None = None
        try:
            while True:
                length = int.from_bytes(await reader.readexactly(4), "big")
                if length > _wire.MAX_FRAME:
                    ended = Internal(f"the broker sent a frame of {length} bytes, over the protocol's limit")
                    break
                message = _wire.decode(await reader.readexactly(length))
                if message is not None:
                    stray = self._dispatch(message) or stray
        except MSSOError as unreadable:   # the stream can no longer be trusted
            ended = unreadable
        except (asyncio.IncompleteReadError, OSError):
            pass
        writer.close()
        if self._writer is writer or self._writer is None:
            if self._writer is writer:
                self._writer = None
            reason = stray or ended   # what the daemon said before closing is the better reason
            self._fail_pending(reason)
            if self._subscribed:
                self._subscribed, self._signals_ended = False, reason
            self._signal_arrived.set()

    def _dispatch(self, message: dict) -> MSSOError | None:
        """Files one message; returns a serial-0 error (why the daemon will close the connection)."""
        kind = message.get("type")
        if kind == "reply" or kind == "error":
            waiter = self._waiting.get(message.get("serial"))  # type: ignore[arg-type]
            if waiter is not None and not waiter[0].done():
                waiter[0].set_result(message)
                return None
            return _wire.stray_error(message)
        if kind == "signal":
            if message.get("signal") in _wire.PROMPTS:
                waiter = self._waiting.get(message.get("serial"))  # type: ignore[arg-type]
                if waiter is not None and waiter[1] is not None:
                    self._prompt(waiter, message.get("prompt") or message.get("browser") or {})
            else:
                self._signals.append(_wire.signal_of(message))
                self._signal_arrived.set()
        return None

    def _prompt(self, waiter: tuple[asyncio.Future[dict], Callable[[Any], Any] | None], prompt: dict) -> None:
        answer, on_prompt = waiter

        def failed(error: BaseException) -> None:   # the login fails with the callback's error; the reader goes on
            if not answer.done():
                answer.set_exception(error)
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
