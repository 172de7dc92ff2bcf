package msso

import "fmt"

// Error is an error the broker answered with (or, for BrokerUnreachable, the failure to reach
// it). Name is the protocol's stable name: branch on it, or with errors.Is against the Err
// values below. Message is the daemon's sentence for the user, which never holds a secret.
type Error struct {
	Name    string
	Message string
}

// Error returns the daemon's sentence (it says what to do next), or the name when there is none.
func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Name
}

// Is makes errors.Is(err, msso.ErrNotLoggedIn) work. A name this library does not know (a newer
// daemon's) is ErrInternal too, as the protocol asks clients to treat it.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.Name == e.Name {
		return true
	}
	_, known := exitStatuses[e.Name]
	return t.Name == "Internal" && !known
}

// ExitStatus is what the msso command exits with for the same error, so that a Go tool can
// exit as the CLI would: 1 expired, 2 not logged in, 3 broker unreachable, 7 forbidden, …
func (e *Error) ExitStatus() int {
	if status, ok := exitStatuses[e.Name]; ok {
		return status
	}
	return 70
}

// The protocol's errors (docs/PROTOCOL.md), for errors.Is. Their exit statuses are those of
// Sources/MSSOClient/ExitStatus.swift; errors_test.go holds both lists to the Swift sources.
var (
	ErrNotLoggedIn        = &Error{Name: "NotLoggedIn"}        // no credential is stored for the group: log in
	ErrExpired            = &Error{Name: "Expired"}            // the session window passed, or the IdP ended it: log in again
	ErrCorrupt            = &Error{Name: "Corrupt"}            // the stored credential is damaged: `msso logout`, then log in
	ErrBusy               = &Error{Name: "Busy"}               // the daemon is at a limit: try again later
	ErrTimedOut           = &Error{Name: "TimedOut"}           // the daemon closed an idle connection
	ErrKeyringLocked      = &Error{Name: "KeyringLocked"}      // the keyring is locked; nothing was read or changed
	ErrKeyringUnavailable = &Error{Name: "KeyringUnavailable"} // no Secret Service answered
	ErrLocked             = &Error{Name: "Locked"}             // the broker is locked (`msso lock`), or a wrong unlock
	ErrIdPUnavailable     = &Error{Name: "IdPUnavailable"}     // the identity provider could not be reached
	ErrInvalidCredentials = &Error{Name: "InvalidCredentials"} // the identity provider refused the username or password
	ErrLoginDenied        = &Error{Name: "LoginDenied"}        // a login was denied, its code expired, or it came back as another account than the group's
	ErrForbidden          = &Error{Name: "Forbidden"}          // this caller may not use this method
	ErrResourceForbidden  = &Error{Name: "ResourceForbidden"}  // the URL is outside the group's resources
	ErrNotEntitled        = &Error{Name: "NotEntitled"}        // this program is not registered for the group
	ErrUnknownGroup       = &Error{Name: "UnknownGroup"}       // no such access group is configured
	ErrUnknownMethod      = &Error{Name: "UnknownMethod"}      // the daemon has no such method
	ErrBadRequest         = &Error{Name: "BadRequest"}         // missing or invalid arguments
	ErrUnsupportedVersion = &Error{Name: "UnsupportedVersion"} // the daemon does not speak this protocol version
	ErrConfigInvalid      = &Error{Name: "ConfigInvalid"}      // the group's configuration is unusable
	ErrBrokerUnreachable  = &Error{Name: "BrokerUnreachable"}  // client side only: nothing answers, or the connection was lost
	ErrInternal           = &Error{Name: "Internal"}           // a bug in the daemon, or an error name not known here
)

var exitStatuses = map[string]int{
	"NotLoggedIn": 2, "Expired": 1, "Corrupt": 4, "Busy": 3, "TimedOut": 3, "KeyringLocked": 4,
	"KeyringUnavailable": 4, "Locked": 8, "IdPUnavailable": 5, "InvalidCredentials": 6, "LoginDenied": 6,
	"Forbidden": 7, "ResourceForbidden": 7, "NotEntitled": 7, "UnknownGroup": 64, "UnknownMethod": 64,
	"BadRequest": 64, "UnsupportedVersion": 64, "ConfigInvalid": 78, "BrokerUnreachable": 3, "Internal": 70,
}

func unreachable(format string, args ...any) *Error {
	return &Error{Name: "BrokerUnreachable", Message: fmt.Sprintf(format, args...)}
}
