"""msso.httpx.Auth: every request of an httpx client signed by the broker, sync or async.

    import httpx, msso.httpx

    with httpx.Client(auth=msso.httpx.Auth(group="com.example.suite")) as http:
        http.get("https://api.example.com/items")

    async with httpx.AsyncClient(auth=msso.httpx.Auth()) as http:
        await http.get("https://api.example.com/items")

Needs `httpx` (`pip install msso[httpx]`).
"""
from __future__ import annotations

import os
import threading
from typing import AsyncGenerator, Generator

import httpx

from . import _auth
from .aio import Client as AsyncClient
from .client import Client

__all__ = ["Auth"]


class Auth(httpx.Auth):
    """Adds the headers `sign` returns for each request (bearer, DPoP or RFC 9421, per the group's
    profile). On a 401 carrying `DPoP-Nonce` (RFC 9449 §9: `WWW-Authenticate: DPoP
    error="use_dpop_nonce"`) it signs once more with the server's nonce and sends the request again;
    a nonce a server sends with another answer goes into the next proof to that origin.

    The body is read first (`requires_request_body`), so its digest is signed. A redirect is
    followed by httpx with the first request's headers (Authorization only within the origin),
    which a DPoP proof or a signature for another URL does not pass: sign the final URL.

    Sync clients use `client` (a msso.Client, opened at the first request otherwise); async ones
    `aio_client` (a msso.aio.Client, likewise, on the event loop of the first request: use one
    Auth per event loop). `account`: the group's account to sign as (default: the client's,
    which is $MSSO_ACCOUNT unless it was given one).
    """

    requires_request_body = True

    def __init__(self, client: Client | None = None, *, aio_client: AsyncClient | None = None, group: str | None = None,
                 socket_path: str | os.PathLike[str] | None = None, account: str | None = None):
        self.group = group
        self.account = account
        self._client = client
        self._aio_client = aio_client
        self._socket_path = socket_path
        self._lock = threading.Lock()
        self._nonces = _auth.Nonces()

    @property
    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = Client(self._socket_path, connect=False)  # connects at its first call
            return self._client

    @property
    def aio_client(self) -> AsyncClient:
        if self._aio_client is None:
            self._aio_client = AsyncClient(self._socket_path)
        return self._aio_client

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.read()
        origin = _auth.origin(str(request.url))
        self._apply(request, self.client.sign(*self._described(request), group=self.group, account=self.account,
                                              dpop_nonce=self._nonces.take(origin)))
        response = yield request
        nonce = _auth.nonce_asked(response.status_code, response.headers)
        if nonce is not None:
            self._apply(request, self.client.sign(*self._described(request), group=self.group, account=self.account,
                                                  dpop_nonce=nonce))
            self._nonces.given(origin, nonce)
            response = yield request
        self._nonces.seen(origin, response.headers.get("DPoP-Nonce"))

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        await request.aread()
        origin = _auth.origin(str(request.url))
        self._apply(request, await self.aio_client.sign(*self._described(request), group=self.group, account=self.account,
                                                        dpop_nonce=self._nonces.take(origin)))
        response = yield request
        nonce = _auth.nonce_asked(response.status_code, response.headers)
        if nonce is not None:
            self._apply(request, await self.aio_client.sign(*self._described(request), group=self.group,
                                                            account=self.account, dpop_nonce=nonce))
            self._nonces.given(origin, nonce)
            response = yield request
        self._nonces.seen(origin, response.headers.get("DPoP-Nonce"))

    @staticmethod
    def _described(request: httpx.Request) -> tuple[str, str, list[tuple[str, str]], bytes]:
        return request.method, str(request.url), _auth.coverable(request.headers.multi_items()), request.content

    @staticmethod
    def _apply(request: httpx.Request, headers: list[tuple[str, str]]) -> None:
        for name, value in headers:
            request.headers[name] = value
