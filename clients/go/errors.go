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
	return exitStatuses[ErrInternal.Name]
}

// The Err values, one per error name, and the exit status of each (exitStatuses) are in names.go,
// generated from protocol/names.json by scripts/generate-names.

func unreachable(format string, args ...any) *Error {
	return &Error{Name: "BrokerUnreachable", Message: fmt.Sprintf(format, args...)}
}
