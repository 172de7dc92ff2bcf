"""msso.requests.Auth: every request of the `requests` library signed by the broker.

    import requests, msso.requests

    session = requests.Session()
    session.auth = msso.requests.Auth(group="com.example.suite")
    session.get("https://api.example.com/items")

Needs `requests` (`pip install msso[requests]`).
"""
from __future__ import annotations

import os
from typing import Any

import requests

from . import _auth
from .client import Client

__all__ = ["Auth"]


class Auth(requests.auth.AuthBase):
    """Adds the headers `sign` returns for each request: bearer, DPoP or RFC 9421, whatever the
    group's profile is. A 401 with a `DPoP-Nonce` is answered once more with a proof carrying that
    nonce (RFC 9449 §9); a nonce a server sends with another answer goes into the next proof.

    The body's digest is signed when it is bytes or text; a streamed body (a file, a generator) is
    sent without one, so an RFC 9421 profile does not cover it. requests does not call an auth
    again on a redirect: it keeps the first request's headers (Authorization only within the
    host), which a DPoP proof or a signature for another URL does not pass; sign the final URL.

    `client`: a msso.Client to use (one is opened at the first request otherwise, with
    `socket_path`). `account`: the group's account to sign as (default: the client's, which is
    $MSSO_ACCOUNT unless it was given one). Safe to share between threads, like the Client.
    """

    def __init__(self, client: Client | None = None, *, group: str | None = None,
                 socket_path: str | os.PathLike[str] | None = None, account: str | None = None):
        self.group = group
        self.account = account
        self._client = client
        self._socket_path = socket_path
        self._nonces = _auth.Nonces()

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._socket_path, connect=False)  # connects at its first call
        return self._client

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        origin = _auth.origin(request.url or "")
        self._sign(request, self._nonces.take(origin))
        request.register_hook("response", self._answered)
        return request

    def _sign(self, request: requests.PreparedRequest, nonce: str | None) -> None:
        body = request.body if isinstance(request.body, (bytes, str)) else None
        signed = self.client.sign(request.method or "GET", request.url or "", _auth.coverable(request.headers), body,
                                  group=self.group, dpop_nonce=nonce, account=self.account)
        for name, value in signed:
            request.headers[name] = value

    def _answered(self, response: requests.Response, **kwargs: Any) -> requests.Response:
        request = response.request
        origin = _auth.origin(request.url or "")
        nonce = _auth.nonce_asked(response.status_code, response.headers)
        retry = nonce is not None and not getattr(request, "_msso_retried", False) and (
            request.body is None or isinstance(request.body, (bytes, str)))
        if not retry:
            self._nonces.seen(origin, response.headers.get("DPoP-Nonce"))
            return response
        # The server wants a proof with its nonce: once more, as requests' own digest auth retries.
        response.content  # noqa: B018 (read it, so that the connection can be reused)
        response.close()
        again = request.copy()
        again._msso_retried = True  # type: ignore[attr-defined]
        self._sign(again, nonce)
        self._nonces.given(origin, nonce)
        answer = response.connection.send(again, **kwargs)
        answer.history.append(response)
        answer.request = again
        self._nonces.seen(origin, answer.headers.get("DPoP-Nonce"))
        return answer
