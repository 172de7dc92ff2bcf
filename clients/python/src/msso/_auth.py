"""What msso.requests.Auth and msso.httpx.Auth share: which headers and body a request gives
`sign`, and the DPoP nonces servers send (RFC 9449 §8-9)."""
from __future__ import annotations

import threading
import urllib.parse
from typing import Iterable, Mapping

from ._wire import COVERABLE_HEADERS


def origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def coverable(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The request's headers that a signing profile may cover (the rest never crosses the socket)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(name, value) for name, value in pairs if name.lower() in COVERABLE_HEADERS]


def nonce_asked(status: int, headers: Mapping[str, str]) -> str | None:
    """The nonce of a 401 that asks for a proof with it: the `DPoP-Nonce` header (RFC 9449 §9;
    `WWW-Authenticate: DPoP error="use_dpop_nonce"` says the same, but only the header carries it)."""
    return headers.get("DPoP-Nonce") if status == 401 else None


class Nonces:
    """DPoP nonces servers sent in answers that need no retry (a new one with a 200, RFC 9449 §8.2),
    per origin, until the next `sign` for that origin hands them to the broker (which then keeps
    them for every app of the group)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._new: dict[str, str] = {}      # origin -> a nonce the broker has not been given
        self._given: dict[str, str] = {}    # origin -> the last nonce it was given by this Auth

    def take(self, origin: str) -> str | None:
        with self._lock:
            nonce = self._new.pop(origin, None)
            if nonce is not None:
                self._given[origin] = nonce
            return nonce

    def seen(self, origin: str, nonce: str | None) -> None:
        if nonce:
            with self._lock:
                if self._given.get(origin) != nonce:
                    self._new[origin] = nonce

    def given(self, origin: str, nonce: str) -> None:
        with self._lock:
            self._given[origin] = nonce
            self._new.pop(origin, None)
