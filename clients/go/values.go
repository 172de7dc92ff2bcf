package msso

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// State is a group's session state. Its values, StateValid, StateExpired, StateNotLoggedIn and
// StateCorrupt, are in names.go (generated from protocol/names.json).
type State string

// SessionStatus is one session: a group's account's. Times absent from the daemon's answer are zero.
type SessionStatus struct {
	Group string
	// Account is which of the group's accounts ("default" for the one a login names none; ""
	// from a daemon before accounts); IsDefault: it is the one a call naming no account gets.
	Account              string
	IsDefault            bool
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

// The daemon's values are held to the protocol as they are read (as every library reads them):
// a required field missing, or any of the wrong type, is an error (*malformed, or json's), which
// the client reports as ErrInternal and closes the connection for; a null is an absent field.

func (s *SessionStatus) UnmarshalJSON(data []byte) error {
	if err := object(data, "a session"); err != nil {
		return err
	}
	var wire struct {
		Group, State                                                     *string
		Account, Issuer, Username, PreviousAccount                       string
		LoggedInAt, SessionExpiresAt, SessionMaxAt, AccessTokenExpiresAt *float64
		IsDefault, Admin, Locked, NewAccount                             bool
	}
	if err := decode(data, &wire); err != nil {
		return err
	}
	if wire.Group == nil || wire.State == nil {
		return &malformed{"a session has no group or state"}
	}
	*s = SessionStatus{Group: *wire.Group, Account: wire.Account, IsDefault: wire.IsDefault, State: State(*wire.State),
		Issuer: wire.Issuer, Username: wire.Username,
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
	if err := object(data, "the status"); err != nil {
		return err
	}
	var wire struct {
		Groups   *[]SessionStatus
		Locked   bool
		LockedAt *float64
		Store    *Store
	}
	if err := decode(data, &wire); err != nil {
		return err
	}
	if wire.Groups == nil {
		return missing("groups")
	}
	*s = Status{Groups: *wire.Groups, Locked: wire.Locked, LockedAt: epoch(wire.LockedAt), Store: wire.Store}
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

func (h *Hello) UnmarshalJSON(data []byte) error {
	if err := object(data, "the hello"); err != nil {
		return err
	}
	var wire struct {
		Version *uint32
		Daemon  *string
		Peer    *struct {
			UID, PID   *uint32
			Executable string
		}
	}
	if err := decode(data, &wire); err != nil {
		return err
	}
	switch {
	case wire.Version == nil || wire.Daemon == nil || wire.Peer == nil:
		return &malformed{"the hello has no version, daemon or peer"}
	case wire.Peer.UID == nil || wire.Peer.PID == nil:
		return &malformed{"the hello's peer has no uid or pid"}
	}
	*h = Hello{Version: int(*wire.Version), Daemon: *wire.Daemon,
		Peer: Peer{UID: int(*wire.Peer.UID), PID: int(*wire.Peer.PID), Executable: wire.Peer.Executable}}
	return nil
}

// LogoutResult says which groups a logout ended and whether the identity provider revoked their
// tokens: Revoked is false when nothing was logged out, or when one of them stays valid there
// (NotRevoked says which, why and until when).
type LogoutResult struct {
	LoggedOut  []string      // the groups, once each
	Sessions   []AccountName // each session ended: its group and account
	Revoked    bool
	NotRevoked []NotRevoked
}

// AccountName is one session of a group: the group, and which of its accounts.
type AccountName struct {
	Group   string
	Account string
}

func (l *LogoutResult) UnmarshalJSON(data []byte) error {
	if err := object(data, "the logout's result"); err != nil {
		return err
	}
	var wire struct {
		LoggedOut *[]*string
		Sessions  []struct {
			Group, Account *string
		}
		Revoked    bool
		NotRevoked []NotRevoked
	}
	if err := decode(data, &wire); err != nil {
		return err
	}
	loggedOut, err := stringList(wire.LoggedOut, "loggedOut")
	if err != nil {
		return err
	}
	var sessions []AccountName
	for _, ended := range wire.Sessions {
		if ended.Group == nil || ended.Account == nil {
			return &malformed{"a session logged out has no group or account"}
		}
		sessions = append(sessions, AccountName{Group: *ended.Group, Account: *ended.Account})
	}
	*l = LogoutResult{LoggedOut: loggedOut, Sessions: sessions, Revoked: wire.Revoked, NotRevoked: wire.NotRevoked}
	return nil
}

// NotRevoked is an ended session whose tokens the identity provider still honours.
type NotRevoked struct {
	Group                string
	Account              string // "" from a daemon before accounts
	Reason               string
	AccessTokenExpiresAt time.Time
	RefreshToken         bool // a refresh token stays valid too
}

func (n *NotRevoked) UnmarshalJSON(data []byte) error {
	if err := object(data, "a session not revoked"); err != nil {
		return err
	}
	var wire struct {
		Group, Reason        *string
		Account              string
		AccessTokenExpiresAt *float64
		RefreshToken         *bool
	}
	if err := decode(data, &wire); err != nil {
		return err
	}
	if wire.Group == nil || wire.Reason == nil || wire.RefreshToken == nil {
		return &malformed{"a session not revoked has no group, reason or refreshToken"}
	}
	*n = NotRevoked{Group: *wire.Group, Account: wire.Account, Reason: *wire.Reason, AccessTokenExpiresAt: epoch(wire.AccessTokenExpiresAt),
		RefreshToken: *wire.RefreshToken}
	return nil
}

// LockState is the answer to Lock and Unlock.
type LockState struct {
	Locked   bool
	LockedAt time.Time
}

func (l *LockState) UnmarshalJSON(data []byte) error {
	if err := object(data, "the lock's state"); err != nil {
		return err
	}
	var wire struct {
		Locked   *bool
		LockedAt *float64
	}
	if err := decode(data, &wire); err != nil {
		return err
	}
	if wire.Locked == nil {
		return missing("locked")
	}
	*l = LockState{Locked: *wire.Locked, LockedAt: epoch(wire.LockedAt)}
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
	if err := decode(data, &wire); err != nil {
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

// The results of the verbs that return no type of their own, checked after json decoded them
// (decodeAnswer calls check).

type pingResult struct {
	Data *string `json:"data"`
}

func (r *pingResult) check() *malformed {
	if r.Data == nil {
		return missing("data")
	}
	return nil
}

type signResult struct {
	Headers *[][]*string `json:"headers"`
}

func (r *signResult) check() *malformed {
	if r.Headers == nil {
		return missing("headers")
	}
	for i, pair := range *r.Headers {
		if len(pair) != 2 || pair[0] == nil || pair[1] == nil {
			return &malformed{fmt.Sprintf("`headers[%d]` is not a pair of strings", i)}
		}
	}
	return nil
}

type tokenResult struct {
	AccessToken *string  `json:"accessToken"`
	ExpiresAt   *float64 `json:"expiresAt"`
	Header      *string  `json:"header"`
}

func (r *tokenResult) check() *malformed {
	if r.AccessToken == nil || r.ExpiresAt == nil || r.Header == nil {
		return &malformed{"the token has no accessToken, expiresAt or header"}
	}
	return nil
}

// groupList is subscribe's result: its groups.
type groupList []string

func (g *groupList) UnmarshalJSON(data []byte) error {
	if err := object(data, "the subscription"); err != nil {
		return err
	}
	var wire struct{ Groups *[]*string }
	if err := decode(data, &wire); err != nil {
		return err
	}
	groups, err := stringList(wire.Groups, "groups")
	*g = groups
	return err
}

// decode is json.Unmarshal whose error names the field (json would name the outer one instead).
func decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return readErr(err)
	}
	return nil
}

// object is an error unless data is a JSON object (json would take null for an empty one).
func object(data []byte, what string) error {
	if len(data) == 0 || data[0] != '{' {
		return &malformed{what + " is not an object"}
	}
	return nil
}

func missing(key string) *malformed {
	return &malformed{"`" + key + "` is missing"}
}

// stringList is a required list of strings (nil: missing; a null in it is not a string).
func stringList(list *[]*string, key string) ([]string, error) {
	if list == nil {
		return nil, missing(key)
	}
	out := make([]string, len(*list))
	for i, item := range *list {
		if item == nil {
			return nil, &malformed{fmt.Sprintf("`%s[%d]` is not a string", key, i)}
		}
		out[i] = *item
	}
	return out, nil
}

// loginPrompt is what a device or browser login asks the user to do, read from its signal.
type loginPrompt struct {
	group, verificationURI, verificationURIComplete, userCode, url string
	expiresAt                                                      float64
	joined                                                         bool
}

// promptOf reads a DevicePrompt's `prompt` or a BrowserPrompt's `browser`, as libmsso does.
func promptOf(m *message) (*loginPrompt, *malformed) {
	device := *m.Signal == "DevicePrompt"
	raw, key := m.Browser, "browser"
	if device {
		raw, key = m.Prompt, "prompt"
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &malformed{"`" + key + "` is not an object"}
	}
	var wire struct {
		VerificationURI, UserCode, URL *string
		VerificationURIComplete        string
		ExpiresAt                      *float64
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		return nil, readErr(err)
	}
	if joined := string(m.Joined); joined != "" && joined != "true" && joined != "false" && joined != "null" {
		return nil, &malformed{"`joined` is not true or false"}
	}
	p := &loginPrompt{group: *m.Group, verificationURIComplete: wire.VerificationURIComplete, joined: string(m.Joined) == "true"}
	switch {
	case wire.ExpiresAt == nil:
		return nil, missing(key + ".expiresAt")
	case device && (wire.VerificationURI == nil || wire.UserCode == nil):
		return nil, &malformed{"`prompt` has no verificationURI or userCode"}
	case device:
		p.verificationURI, p.userCode = *wire.VerificationURI, *wire.UserCode
	case wire.URL == nil:
		return nil, missing("browser.url")
	default:
		p.url = *wire.URL
	}
	p.expiresAt = *wire.ExpiresAt
	return p, nil
}
