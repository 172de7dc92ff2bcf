package msso

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
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

// decodeAnswer decodes a reply's result into result (nil: ignored; a *json.RawMessage gets it as
// it came), or returns the error an error message carries: one pass over the frame, which for a
// sign reply is mostly its token.
func decodeAnswer(payload []byte, result any) error {
	if result == nil {
		result = new(json.RawMessage)
	}
	envelope := struct {
		Type    string `json:"type"`
		Error   string `json:"error"`
		Message string `json:"message"`
		Result  any    `json:"result"` // json decodes into the pointer it holds
	}{Result: result}
	if err := json.Unmarshal(payload, &envelope); err != nil {
		return &Error{Name: "Internal", Message: "the broker's reply could not be read: " + err.Error()}
	}
	if envelope.Type == "error" {
		return errorOf(&message{Error: envelope.Error, Message: envelope.Message})
	}
	return nil
}

// peek reads a message's top-level "type" and "serial" without decoding the rest, so that the
// reader can hand a reply to its caller, who decodes it once, into its own type. ok is false
// for anything it does not follow (a key with an escape, say): the message is then decoded whole.
func peek(data []byte) (kind string, serial uint32, ok bool) {
	i := space(data, 0)
	if i == len(data) || data[i] != '{' {
		return "", 0, false
	}
	for i = space(data, i+1); i < len(data) && data[i] != '}'; {
		key, next, good := plain(data, i)
		if i = space(data, next); !good || i == len(data) || data[i] != ':' {
			return "", 0, false
		}
		i = space(data, i+1)
		switch string(key) {
		case "type":
			var value []byte
			value, i, good = plain(data, i)
			kind = string(value)
		case "serial":
			serial, i, good = number(data, i)
		default:
			i, good = skip(data, i)
		}
		if i = space(data, i); !good || i == len(data) {
			return "", 0, false
		}
		if data[i] == ',' {
			i = space(data, i+1)
		}
	}
	return kind, serial, i < len(data) && kind != ""
}

func space(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r') {
		i++
	}
	return i
}

// plain is the string at i, when it holds no escape.
func plain(data []byte, i int) ([]byte, int, bool) {
	if i == len(data) || data[i] != '"' {
		return nil, i, false
	}
	end := bytes.IndexByte(data[i+1:], '"')
	if end < 0 || bytes.IndexByte(data[i+1:i+1+end], '\\') >= 0 {
		return nil, i, false
	}
	return data[i+1 : i+1+end], i + end + 2, true
}

func number(data []byte, i int) (uint32, int, bool) {
	start := i
	var n uint64
	for ; i < len(data) && data[i] >= '0' && data[i] <= '9' && i-start < 10; i++ {
		n = n*10 + uint64(data[i]-'0')
	}
	return uint32(n), i, i > start && n <= math.MaxUint32
}

// skip passes over the value at i: a string, an object or array (the strings inside skipped
// whole, so that their brackets do not count), or a literal.
func skip(data []byte, i int) (int, bool) {
	depth := 0
	for ; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if i >= len(data) {
				return i, false
			}
			if depth == 0 {
				return i + 1, true
			}
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return i, true // a literal, ended by the enclosing object's end
			}
			if depth--; depth == 0 {
				return i + 1, true
			}
		case depth == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r'):
			return i, true
		}
	}
	return i, false
}
