"""A backend for the `keyring` package: pip, twine and poetry get a group's access token as the
password of a private package index, for as long as the user is logged in.

Installed with the package (entry point `keyring.backends`: msso), it is used by `keyring`
wherever msso's socket exists, after the keyrings that store passwords (a password stored there for
the same URL wins). It answers only for http(s) URLs, and names each as the token's `resource`, so
a group that lists `resources` hands its token to those servers only. Settings (keyring's
`KEYRING_PROPERTY_*` variables): `KEYRING_PROPERTY_GROUP`, the access group (default: the only
one, or the one this program is registered for); `KEYRING_PROPERTY_ACCOUNT`, the group's account
(default: $MSSO_ACCOUNT, else the group's default account); `KEYRING_PROPERTY_USERNAME`, the user
name returned with the token (default `__token__`).

Needs `keyring` (`pip install msso[keyring]`).
"""
from __future__ import annotations

import logging
import os
import urllib.parse

from keyring.backend import KeyringBackend
from keyring.compat import properties
from keyring.credentials import SimpleCredential
from keyring.errors import PasswordDeleteError, PasswordSetError

from ._wire import default_socket_path
from .client import Client
from .errors import MSSOError

__all__ = ["MSSOKeyring"]

log = logging.getLogger(__name__)


class ReadOnly(PasswordSetError, PasswordDeleteError, NotImplementedError):
    """msso lends tokens; it stores nothing. (Also NotImplementedError: keyring's chainer then
    stores the password in the next backend.)"""


class MSSOKeyring(KeyringBackend):
    """The broker's access token as the password for an http(s) service URL."""

    group: str | None = None
    account: str | None = None
    username: str = "__token__"

    @properties.classproperty
    def priority(cls) -> float:
        # Below the keyrings that store passwords (Secret Service: 5), above keyrings.alt's files.
        if not os.path.exists(default_socket_path()):
            raise RuntimeError("no msso broker socket")
        return 1

    def get_password(self, service: str, username: str | None) -> str | None:
        return self._token(service)

    def get_credential(self, service: str, username: str | None) -> SimpleCredential | None:
        token = self._token(service)
        return None if token is None else SimpleCredential(username or self.username, token)

    def set_password(self, service: str, username: str, password: str) -> None:
        raise ReadOnly("msso lends a group's token for as long as you are logged in (`msso login`); it stores no password")

    def delete_password(self, service: str, username: str) -> None:
        raise ReadOnly("msso stores no password; `msso logout` ends the session")

    def _token(self, service: str) -> str | None:
        url = urllib.parse.urlsplit(service)
        if url.scheme not in ("http", "https"):
            return None   # pip also asks for the bare host; the token goes only with a URL it can be checked against
        try:
            with Client() as broker:
                return broker.token(group=self.group or None, account=self.account or None, resource=service).access_token
        except MSSOError as error:
            # The daemon's sentence says what to do (log in, register, ...) and holds no secret;
            # the URL is shown without any user info it may carry.
            shown = url._replace(netloc=url.netloc.rpartition("@")[2]).geturl()
            log.warning("msso: no token for %s: %s", shown, error.message or error.name)
            return None
