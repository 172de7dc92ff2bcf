"""msso: Python client for the msso single-sign-on broker (mssod), over its Unix socket.

    import msso

    with msso.Client() as broker:                 # $MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock
        headers = broker.sign("GET", "https://api.example.com/items")

Standard library only. `msso.aio` has the same verbs for asyncio; `msso.requests.Auth` and
`msso.httpx.Auth` sign each request of those HTTP libraries; `msso.keyring` lends a group's
token to pip, twine and poetry. The protocol: docs/PROTOCOL.md in the msso sources.
"""
from ._wire import (PROTOCOL_VERSION, AccountName, AuditEntry, BrowserPrompt, DevicePrompt, Headers, KeyDescription, LockState,
                    LogoutResult, SessionStatus, Signal, Token, default_socket_path)
from .client import Client
from .errors import *  # noqa: F403 (the exception classes, one per protocol error name)
from .errors import __all__ as _errors

# msso's version: the top entry of dist/debian/changelog, written here too (Tests/e2e/test_readme.py).
__version__ = "0.2.0"

__all__ = ["Client", "PROTOCOL_VERSION", "AccountName", "AuditEntry", "BrowserPrompt", "DevicePrompt", "Headers", "KeyDescription",
           "LockState", "LogoutResult", "SessionStatus", "Signal", "Token", "default_socket_path", *_errors]
