package msso

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ProtocolVersion is the version of docs/PROTOCOL.md this library speaks.
const ProtocolVersion = 1

// maxFrame caps a frame's payload, both ways; the daemon closes a connection that sends more.
const maxFrame = 65536

// DefaultSocketPath is where the user's broker listens: $MSSO_SOCKET, else
// $XDG_RUNTIME_DIR/msso/broker.sock, else /run/user/UID/msso/broker.sock.
func DefaultSocketPath() string {
	if path := os.Getenv("MSSO_SOCKET"); path != "" {
		return path
	}
	if runtime := os.Getenv("XDG_RUNTIME_DIR"); runtime != "" {
		return filepath.Join(runtime, "msso", "broker.sock")
	}
	return fmt.Sprintf("/run/user/%d/msso/broker.sock", os.Getuid())
}

type call struct {
	Type   string `json:"type"`
	Serial uint32 `json:"serial"`
	Method string `json:"method"`
	Args   any    `json:"args"`
}

// message is any message from the daemon: a reply, an error or a signal.
type message struct {
	Type    string          `json:"type"`
	Serial  uint32          `json:"serial"`
	Result  json.RawMessage `json:"result"`
	Error   string          `json:"error"`
	Message string          `json:"message"`
	Signal  string          `json:"signal"`
	Group   string          `json:"group"`
	Status  *SessionStatus  `json:"status"`
	Joined  bool            `json:"joined"`
	Prompt  *struct {
		VerificationURI         string   `json:"verificationURI"`
		VerificationURIComplete string   `json:"verificationURIComplete"`
		UserCode                string   `json:"userCode"`
		ExpiresAt               *float64 `json:"expiresAt"`
	} `json:"prompt"`
	Browser *struct {
		URL       string   `json:"url"`
		ExpiresAt *float64 `json:"expiresAt"`
	} `json:"browser"`
}

// frame encodes a call: a 4-byte big-endian length, then the JSON.
func frame(serial uint32, method string, args any) ([]byte, error) {
	if args == nil {
		args = struct{}{}
	}
	payload, err := json.Marshal(call{Type: "call", Serial: serial, Method: method, Args: args})
	if err != nil {
		return nil, err
	}
	if len(payload) > maxFrame {
		// The daemon would close the connection; say so here, without the arguments (a password?).
		return nil, &Error{Name: "BadRequest", Message: fmt.Sprintf("the %s call is %d bytes; the protocol's limit is %d",
			method, len(payload), maxFrame)}
	}
	out := make([]byte, 4, 4+len(payload))
	binary.BigEndian.PutUint32(out, uint32(len(payload)))
	return append(out, payload...), nil
}

// errorOf is the error an error message carries.
func errorOf(m *message) *Error {
	name := m.Error
	if name == "" {
		name = "Internal"
	}
	return &Error{Name: name, Message: m.Message}
}

// resultOf decodes a reply's result into result (nil: ignored), or returns the error it carries.
func resultOf(m *message, result any) error {
	if m.Type == "error" {
		return errorOf(m)
	}
	if m.Result == nil {
		return &Error{Name: "Internal", Message: "the broker's reply had no result"}
	}
	if result == nil {
		return nil
	}
	if raw, ok := result.(*json.RawMessage); ok {
		*raw = m.Result
		return nil
	}
	if err := json.Unmarshal(m.Result, result); err != nil {
		return &Error{Name: "Internal", Message: "the broker's reply could not be read: " + err.Error()}
	}
	return nil
}
