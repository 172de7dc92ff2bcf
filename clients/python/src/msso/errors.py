"""The broker's errors, one exception class per name in docs/PROTOCOL.md's error table.

Each carries `name` (the protocol's stable name: branch on the class or on it), `message` (the
daemon's sentence for the user, which never holds a secret) and `exit_status` (what the `msso`
command exits with for it), so a Python tool can exit as the CLI would. The classes and their exit
statuses are generated from protocol/names.json, the one definition of the protocol's names, by
scripts/generate-names.
"""
from __future__ import annotations

# BEGIN GENERATED all: by scripts/generate-names from protocol/names.json; do not edit
__all__ = [
    "MSSOError", "NotLoggedIn", "Expired", "Corrupt", "Busy", "TimedOut", "KeyringLocked", "KeyringUnavailable",
    "Locked", "IdPUnavailable", "InvalidCredentials", "LoginDenied", "Forbidden", "ResourceForbidden",
    "NotEntitled", "UnknownGroup", "UnknownMethod", "BadRequest", "UnsupportedVersion", "ConfigInvalid",
    "BrokerUnreachable", "Internal", "ResourceRefused", "ERRORS", "error_for",
]
# END GENERATED all


class MSSOError(Exception):
    """An error from the broker (or, for BrokerUnreachable, from reaching it).

    Never raised itself: every error is an instance of the subclass named after it. A name this
    library does not know (a newer daemon's) is raised as Internal, with `name` the one sent, as the
    protocol asks clients to treat it.
    """

    name: str = "Internal"
    exit_status: int = 70

    def __init__(self, message: str = "", *, name: str | None = None):
        super().__init__(message)
        self.message = message
        if name is not None:
            self.name = name

    def __str__(self) -> str:
        return f"{self.name}: {self.message}" if self.message else self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def copy(self) -> MSSOError:
        """The same error as a new exception (one per thread that raises it, each with its traceback)."""
        return type(self)(self.message, name=self.name)


# BEGIN GENERATED errors: by scripts/generate-names from protocol/names.json; do not edit
class NotLoggedIn(MSSOError):
    """No credential is stored for the group: log in."""
    name, exit_status = "NotLoggedIn", 2


class Expired(MSSOError):
    """The session window has passed, or the identity provider ended the session: log in again."""
    name, exit_status = "Expired", 1


class Corrupt(MSSOError):
    """The stored credential is damaged or not msso's: `msso logout` clears it, then log in."""
    name, exit_status = "Corrupt", 4


class Busy(MSSOError):
    """The daemon is at a limit (connections, logins waiting for the user, confirmations): try again
    later."""
    name, exit_status = "Busy", 3


class TimedOut(MSSOError):
    """The connection was idle too long, or a frame took too long to arrive; the daemon closed it."""
    name, exit_status = "TimedOut", 3


class KeyringLocked(MSSOError):
    """The keyring is locked; nothing was read, changed or deleted."""
    name, exit_status = "KeyringLocked", 4


class KeyringUnavailable(MSSOError):
    """No Secret Service on the session bus, or it did not answer in time."""
    name, exit_status = "KeyringUnavailable", 4


class Locked(MSSOError):
    """The broker is locked (`msso lock`); also a wrong or paused unlock, and lock when already
    locked."""
    name, exit_status = "Locked", 8


class IdPUnavailable(MSSOError):
    """The identity provider could not be reached in time, or answered unexpectedly."""
    name, exit_status = "IdPUnavailable", 5


class InvalidCredentials(MSSOError):
    """The identity provider refused the username or password."""
    name, exit_status = "InvalidCredentials", 6


class LoginDenied(MSSOError):
    """A login was denied, its code expired, or it came back as another account than the group's."""
    name, exit_status = "LoginDenied", 6


class Forbidden(MSSOError):
    """This caller may not use this method, or its call cannot be held to one program."""
    name, exit_status = "Forbidden", 7


class ResourceForbidden(MSSOError):
    """The group's tokens are for named servers only (`resources`), and this URL is not among them."""
    name, exit_status = "ResourceForbidden", 7


class NotEntitled(MSSOError):
    """The calling program is not registered for the group; the message says how to register it."""
    name, exit_status = "NotEntitled", 7


class UnknownGroup(MSSOError):
    """No such access group is configured."""
    name, exit_status = "UnknownGroup", 64


class UnknownMethod(MSSOError):
    """The daemon has no such method."""
    name, exit_status = "UnknownMethod", 64


class BadRequest(MSSOError):
    """Missing or invalid arguments (or a group left out while several are configured)."""
    name, exit_status = "BadRequest", 64


class UnsupportedVersion(MSSOError):
    """The daemon does not speak this library's protocol version."""
    name, exit_status = "UnsupportedVersion", 64


class ConfigInvalid(MSSOError):
    """The group's configuration is unusable (e.g. the identity provider refused the client)."""
    name, exit_status = "ConfigInvalid", 78


class BrokerUnreachable(MSSOError):
    """Client side only, never sent by the daemon: nothing answers on the socket, the connection was
    lost or closed, or a call got no answer within the client's timeout."""
    name, exit_status = "BrokerUnreachable", 3


class Internal(MSSOError):
    """A bug in the daemon (see its log), an error name this library does not know, or a frame it
    cannot read."""
    name, exit_status = "Internal", 70


class ResourceRefused(MSSOError):
    """The identity provider would not mint a token for the server asked for (`tokens =
    "per-resource"`); the session is kept."""
    name, exit_status = "ResourceRefused", 6
# END GENERATED errors


ERRORS: dict[str, type[MSSOError]] = {cls.name: cls for cls in MSSOError.__subclasses__()}


def error_for(name: object, message: object) -> MSSOError:
    """The exception for an error the daemon sent (Internal, keeping the name, for one not known here)."""
    name = name if isinstance(name, str) and name else "Internal"
    message = message if isinstance(message, str) else ""
    return ERRORS.get(name, Internal)(message, name=name)
