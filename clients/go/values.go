package msso

import (
	"encoding/json"
	"math"
	"time"
)

// State is a group's session state.
type State string

// The four states of SessionStatus.State.
const (
	StateValid       State = "valid"       // sign works
	StateExpired     State = "expired"     // logged in once, but the session window has passed
	StateNotLoggedIn State = "notLoggedIn" // no credential
	StateCorrupt     State = "corrupt"     // the stored credential is damaged; logout clears it
)

// SessionStatus is one group's session. Times absent from the daemon's answer are zero.
type SessionStatus struct {
	Group                string
	State                State
	Issuer               string
	Username             string
	LoggedInAt           time.Time
	SessionExpiresAt     time.Time // end of the sliding window (Extend moves it)
	SessionMaxAt         time.Time // the window never passes it
	AccessTokenExpiresAt time.Time
	Admin                bool // the administrator defined the group
	Locked               bool // the broker is locked: nothing signs until unlock
	// In a login's answer and its LoggedIn event only: the login made its account the group's
	// (the group's first, or a change asked for with `msso login --new-account`), in place of
	// PreviousAccount (empty when the group had none).
	NewAccount      bool
	PreviousAccount string
}

func (s *SessionStatus) UnmarshalJSON(data []byte) error {
	var wire struct {
		Group, State, Issuer, Username, PreviousAccount                  string
		LoggedInAt, SessionExpiresAt, SessionMaxAt, AccessTokenExpiresAt *float64
		Admin, Locked, NewAccount                                        bool
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return err
	}
	*s = SessionStatus{Group: wire.Group, State: State(wire.State), Issuer: wire.Issuer, Username: wire.Username,
		LoggedInAt: epoch(wire.LoggedInAt), SessionExpiresAt: epoch(wire.SessionExpiresAt),
		SessionMaxAt: epoch(wire.SessionMaxAt), AccessTokenExpiresAt: epoch(wire.AccessTokenExpiresAt),
		Admin: wire.Admin, Locked: wire.Locked, NewAccount: wire.NewAccount, PreviousAccount: wire.PreviousAccount}
	return nil
}

// Status is the answer to Client.Status.
type Status struct {
	Groups   []SessionStatus
	Locked   bool
	LockedAt time.Time
	Store    *Store // where the sessions are kept (absent from older daemons)
}

func (s *Status) UnmarshalJSON(data []byte) error {
	var wire struct {
		Groups   []SessionStatus
		Locked   bool
		LockedAt *float64
		Store    *Store
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return err
	}
	*s = Status{Groups: wire.Groups, Locked: wire.Locked, LockedAt: epoch(wire.LockedAt), Store: wire.Store}
	return nil
}

// Store says which store holds the sessions, where, and why there.
type Store struct {
	Kind   string `json:"kind"` // "secret-service" or "kernel"
	Place  string `json:"place"`
	Reason string `json:"reason"`
}

// Hello is the daemon's answer to hello: its version and how it sees this process.
type Hello struct {
	Version int    `json:"version"`
	Daemon  string `json:"daemon"`
	Peer    Peer   `json:"peer"`
}

// Peer is how the daemon sees the caller. Executable is what registrations are matched against.
type Peer struct {
	UID        int    `json:"uid"`
	PID        int    `json:"pid"`
	Executable string `json:"executable"`
}

// LogoutResult says which groups a logout ended and whether the identity provider revoked their
// tokens: Revoked is false when nothing was logged out, or when one of them stays valid there
// (NotRevoked says which, why and until when).
type LogoutResult struct {
	LoggedOut  []string
	Revoked    bool
	NotRevoked []NotRevoked
}

// NotRevoked is an ended session whose tokens the identity provider still honours.
type NotRevoked struct {
	Group                string
	Reason               string
	AccessTokenExpiresAt time.Time
	RefreshToken         bool // a refresh token stays valid too
}

func (n *NotRevoked) UnmarshalJSON(data []byte) error {
	var wire struct {
		Group, Reason        string
		AccessTokenExpiresAt *float64
		RefreshToken         bool
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return err
	}
	*n = NotRevoked{Group: wire.Group, Reason: wire.Reason, AccessTokenExpiresAt: epoch(wire.AccessTokenExpiresAt),
		RefreshToken: wire.RefreshToken}
	return nil
}

// LockState is the answer to Lock and Unlock.
type LockState struct {
	Locked   bool
	LockedAt time.Time
}

func (l *LockState) UnmarshalJSON(data []byte) error {
	var wire struct {
		Locked   bool
		LockedAt *float64
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return err
	}
	*l = LockState{Locked: wire.Locked, LockedAt: epoch(wire.LockedAt)}
	return nil
}

// KeyDescription is the public half of a group's signing key.
type KeyDescription struct {
	Group string            `json:"group"`
	Kind  string            `json:"kind"` // "p-256" or "ed25519"
	KeyID string            `json:"keyID"`
	JWK   map[string]string `json:"jwk"`
	PEM   string            `json:"pem"`
}

// AuditEntry is one call the daemon recorded; none holds a token or a password.
type AuditEntry struct {
	Time       time.Time
	UID, PID   int
	Executable string
	App        string
	Group      string
	Verb       string
	Outcome    string // "ok" or "error"
	Error      string // the error's name
}

func (a *AuditEntry) UnmarshalJSON(data []byte) error {
	var wire struct {
		Time                                         float64
		UID, PID                                     int
		Executable, App, Group, Verb, Outcome, Error string
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return err
	}
	*a = AuditEntry{Time: epoch(&wire.Time), UID: wire.UID, PID: wire.PID, Executable: wire.Executable, App: wire.App,
		Group: wire.Group, Verb: wire.Verb, Outcome: wire.Outcome, Error: wire.Error}
	return nil
}

// DevicePrompt is what a device login asks the user to do: open VerificationURI (or
// VerificationURIComplete, which holds the code) on any device and enter UserCode. Joined: the
// login was already waiting for the user (another program started it, and showed the same code).
type DevicePrompt struct {
	Group                   string
	VerificationURI         string
	VerificationURIComplete string
	UserCode                string
	ExpiresAt               time.Time
	Joined                  bool
}

// BrowserPrompt is the address a browser login opens on this machine. Joined: the login was
// already waiting for the user, and its browser window may be open: show the address, do not
// open another.
type BrowserPrompt struct {
	Group     string
	URL       string
	ExpiresAt time.Time
	Joined    bool
}

// epoch reads the protocol's times: seconds since the Unix epoch, possibly fractional.
func epoch(seconds *float64) time.Time {
	if seconds == nil || math.IsNaN(*seconds) || math.IsInf(*seconds, 0) {
		return time.Time{}
	}
	whole, fraction := math.Modf(*seconds)
	return time.Unix(int64(whole), int64(fraction*1e9))
}

func seconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}
