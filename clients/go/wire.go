package msso

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"unicode/utf8"
)

// What a broker can make a client hold, as libmsso (clients/c) bounds it: no reply of the
// protocol nests deeper than a few levels; a subscription keeps at most maxEvents unread signals
// and maxEventBytes of their frames (else 4,096 frames of 64 KiB: 256 MiB), past which the
// connection is closed, as the daemon closes a subscriber that stops reading.
const (
	maxDepth      = 32
	maxEvents     = 4096
	maxEventBytes = 1 << 20
)

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

// message is any message from the daemon but a reply (which goes to its caller undecoded), held
// to the protocol by envelope: what a field's value should be is checked where it is used.
type message struct {
	Type    *string         `json:"type"`
	Serial  json.RawMessage `json:"serial"`
	Result  json.RawMessage `json:"result"`
	Error   *string         `json:"error"`
	Message *string         `json:"message"`
	Signal  *string         `json:"signal"`
	Group   *string         `json:"group"`
	Status  json.RawMessage `json:"status"`
	Joined  json.RawMessage `json:"joined"`
	Prompt  json.RawMessage `json:"prompt"`
	Browser json.RawMessage `json:"browser"`
}

// malformed is what in a frame from the broker is not the protocol; the connection is closed,
// and its calls fail with ErrInternal naming it (conn.broken).
type malformed struct{ what string }

func (m *malformed) Error() string { return m.what }

// readErr says, as a clause, what json found wrong: a syntax error, a value of the wrong type,
// or one of ours (*malformed).
func readErr(err error) *malformed {
	var m *malformed
	var syntax *json.SyntaxError
	var wrongType *json.UnmarshalTypeError
	switch {
	case errors.As(err, &m):
		return m
	case errors.As(err, &syntax):
		return &malformed{"the frame is not JSON (" + strings.TrimPrefix(syntax.Error(), "json: ") + ")"}
	case errors.As(err, &wrongType) && wrongType.Field == "":
		return &malformed{"the frame is not a JSON object"}
	case errors.As(err, &wrongType):
		return &malformed{fmt.Sprintf("`%s` is a %s, not %s", jsonName(wrongType.Field), wrongType.Value, kindOf(wrongType.Type))}
	}
	return &malformed{"the frame cannot be read (" + err.Error() + ")"}
}

// jsonName is the protocol's name of a field json names by its Go name (SessionExpiresAt, UID).
func jsonName(field string) string {
	names := strings.Split(field, ".")
	for i, name := range names {
		if strings.ToUpper(name) == name {
			names[i] = strings.ToLower(name)
		} else if name != "" {
			names[i] = strings.ToLower(name[:1]) + name[1:]
		}
	}
	return strings.Join(names, ".")
}

// kindOf names what a Go type reads from JSON.
func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Float64, reflect.Float32:
		return "a finite number"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		return "a whole number within " + t.Kind().String()
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}

// checkFrame holds a frame to what libmsso reads and encoding/json does not check: UTF-8 (json
// would replace what is not), at most maxDepth levels of nesting, no NUL or lone surrogate escape
// (\ud800) in a string. The scan runs only when a cheap look (bytes.Count, in assembly) finds
// that its cause may be there: an honest reply has a few brackets and no \u escape.
func checkFrame(payload []byte) *malformed {
	if !utf8.Valid(payload) {
		return &malformed{"a frame that is not UTF-8"}
	}
	deep := bytes.Count(payload, []byte("{"))+bytes.Count(payload, []byte("[")) > maxDepth
	if !deep && !bytes.Contains(payload, []byte(`\u`)) {
		return nil
	}
	depth, inString := 0, false
	for i := 0; i < len(payload); i++ {
		c := payload[i]
		if inString {
			if c == '"' {
				inString = false
			} else if c == '\\' && i+1 < len(payload) && payload[i+1] != 'u' {
				i++
			} else if c == '\\' {
				code := hex4(payload, i+2)
				switch {
				case code == 0:
					return &malformed{"a string with a NUL in it"}
				case code >= 0xDC00 && code <= 0xDFFF:
					return &malformed{"a string with a lone surrogate escape in it"}
				case code >= 0xD800 && code <= 0xDBFF:
					if low := hex4(payload, i+8); i+7 >= len(payload) || payload[i+6] != '\\' || payload[i+7] != 'u' ||
						low < 0xDC00 || low > 0xDFFF {
						return &malformed{"a string with a lone surrogate escape in it"}
					}
					i += 6
				}
				i += 5
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxDepth {
				return &malformed{fmt.Sprintf("a frame nested more than %d levels deep", maxDepth)}
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// hex4 is the four hex digits at i, or -1 (json then says what is wrong).
func hex4(data []byte, i int) int {
	if i+4 > len(data) {
		return -1
	}
	code := 0
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			code = code*16 + int(c-'0')
		case c >= 'a' && c <= 'f':
			code = code*16 + int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			code = code*16 + int(c-'A'+10)
		default:
			return -1
		}
	}
	return code
}

// serialOf reads a serial: a whole number from 0 to 2^32-1, without fraction or exponent.
func serialOf(raw json.RawMessage) (uint32, bool) {
	n, i, ok := number(raw, 0)
	return n, ok && i == len(raw)
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

// errorOf is the error an error message carries (its name and message checked to be strings).
func errorOf(name, message string) *Error {
	if name == "" {
		name = "Internal"
	}
	return &Error{Name: name, Message: message}
}

// answer is a reply or an error for a call, undecoded; result is the first byte of its result
// (0: none), which tells a null from an object when json would set either to nothing.
type answer struct {
	payload []byte
	result  byte
}

// decodeAnswer decodes a reply's result into result (nil: ignored; a *json.RawMessage gets it as
// it came), or returns the error an error message carries: one pass over the frame, which for a
// sign reply is mostly its token. A result or an error that is not the protocol is *malformed.
func decodeAnswer(a answer, result any) error {
	_, raw := result.(*json.RawMessage)
	if result == nil {
		result, raw = new(json.RawMessage), true
	}
	envelope := struct {
		Type    string  `json:"type"`
		Error   *string `json:"error"`
		Message *string `json:"message"`
		Result  any     `json:"result"` // json decodes into the pointer it holds
	}{Result: result}
	if err := json.Unmarshal(a.payload, &envelope); err != nil {
		return readErr(err)
	}
	switch {
	case envelope.Type == "error" && (envelope.Error == nil || envelope.Message == nil):
		return &malformed{"the error has no name or message"}
	case envelope.Type == "error":
		return errorOf(*envelope.Error, *envelope.Message)
	case a.result == 0:
		return &malformed{"the result is missing"}
	case a.result == 'n' && !raw:
		return &malformed{"the result is null"}
	}
	if checked, ok := result.(interface{ check() *malformed }); ok {
		if m := checked.check(); m != nil {
			return m
		}
	}
	return nil
}

// peek reads a message's top-level "type" and "serial" without decoding the rest, so that the
// reader can hand a reply to its caller, who decodes it once, into its own type; and the first
// byte of its "result". ok is false for anything it does not follow (a key with an escape, a
// serial that is not a plain number, say): the message is then decoded whole.
func peek(data []byte) (kind string, serial uint32, result byte, ok bool) {
	i := space(data, 0)
	if i == len(data) || data[i] != '{' {
		return "", 0, 0, false
	}
	for i = space(data, i+1); i < len(data) && data[i] != '}'; {
		key, next, good := plain(data, i)
		if i = space(data, next); !good || i == len(data) || data[i] != ':' {
			return "", 0, 0, false
		}
		i = space(data, i+1)
		switch string(key) {
		case "type":
			var value []byte
			value, i, good = plain(data, i)
			kind = string(value)
		case "serial":
			serial, i, good = number(data, i)
		case "result":
			if i < len(data) {
				result = data[i]
			}
			i, good = skip(data, i)
		default:
			i, good = skip(data, i)
		}
		if i = space(data, i); !good || i == len(data) {
			return "", 0, 0, false
		}
		if data[i] == ',' {
			i = space(data, i+1)
		}
	}
	return kind, serial, result, i < len(data) && kind != ""
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
