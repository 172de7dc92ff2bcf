package msso

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestTokensAndHeadersNeverPrintTheirSecret(t *testing.T) {
	const secret = "eyJ-the-secret-token"
	token := &Token{AccessToken: secret, TokenType: "Bearer", Expiry: time.Unix(2000000000, 0)}
	headers := Headers{{Name: "Authorization", Value: "DPoP " + secret}, {Name: "DPoP", Value: secret}}
	holder := struct {
		T *Token
		V Token
		H Headers
		O Header
	}{token, *token, headers, headers[0]}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		for _, value := range []any{token, *token, headers, headers[0], holder, []*Token{token}} {
			if out := fmt.Sprintf(verb, value); strings.Contains(out, secret) ||
				strings.Contains(out, fmt.Sprintf("%x", secret)) {
				t.Errorf("%s of %T shows the secret: %s", verb, value, out)
			}
		}
	}
	if out := fmt.Sprint(headers); !strings.Contains(out, "Authorization") || !strings.Contains(out, "DPoP") {
		t.Errorf("the names should show: %s", out)
	}
	if headers.Get("dpop") != secret {
		t.Error("Get is case-insensitive")
	}
}

func TestAFrameIsItsLengthThenTheJSON(t *testing.T) {
	data, err := frame(7, "sign", signArgs{Method: "GET", URL: "https://a.example/"})
	if err != nil {
		t.Fatal(err)
	}
	if int(binary.BigEndian.Uint32(data)) != len(data)-4 {
		t.Fatal("the length counts the payload")
	}
	var call map[string]any
	if err := json.Unmarshal(data[4:], &call); err != nil {
		t.Fatal(err)
	}
	if call["type"] != "call" || call["serial"] != 7.0 || call["method"] != "sign" ||
		fmt.Sprint(call["args"]) != "map[method:GET url:https://a.example/]" {
		t.Fatalf("%v", call)
	}
	if data, _ := frame(1, "ping", nil); !strings.HasSuffix(string(data), `"args":{}}`) {
		t.Fatalf("args is required, even empty: %s", data[4:])
	}
	_, err = frame(1, "login", map[string]string{"password": strings.Repeat("p", 70000)})
	if !errors.Is(err, ErrBadRequest) || strings.Contains(err.Error(), "ppp") {
		t.Fatalf("an oversized call is refused here, without its arguments: %v", err)
	}
}

func TestTimesAreSecondsSinceTheEpoch(t *testing.T) {
	var status SessionStatus
	if err := json.Unmarshal([]byte(`{"group":"g","state":"valid","sessionExpiresAt":1700000000.25,"admin":true}`), &status); err != nil {
		t.Fatal(err)
	}
	if status.State != StateValid || !status.Admin || !status.LoggedInAt.IsZero() ||
		status.SessionExpiresAt.UnixMilli() != 1700000000250 {
		t.Fatalf("%+v", status)
	}
}

func TestPeekFindsTheTypeAndSerialWithoutDecoding(t *testing.T) {
	for frame, want := range map[string]string{
		`{"type":"reply","serial":7,"result":{"headers":[["Authorization","Bearer a\"]}b"]]}}`:   "reply 7 { true",
		`{"result": {"x": [1, {"y": "}"}]}, "serial": 4294967295, "type": "reply"}`:              "reply 4294967295 { true",
		`{"type":"reply","serial":2,"result":null}`:                                              "reply 2 n true",
		` { "serial" : 3 , "type" : "error" , "error" : "Expired" , "message" : "m" } `:          "error 3 - true",
		`{"type":"signal","signal":"LoggedIn","group":"g","status":{"state":"valid"},"ok":true}`: "signal 0 - true",
		`{"type":"reply","serial":4294967296}`:                                                   " 0 - false",
		`{"typ\u0065":"reply","serial":1}`:                                                       " 0 - false", // an escape: decoded whole instead
		`{"type":"reply","serial":1`:                                                             " 0 - false",
		`{"type":"reply","serial":1.0,"result":{}}`:                                              " 0 - false",
		`{"serial":1}`: " 0 - false",
		`[1]`:          " 0 - false",
		`{"type":"reply","serial":1,"result":"unterminated}`: " 0 - false",
	} {
		kind, serial, result, ok := peek([]byte(frame))
		if kind == "" && !ok {
			serial, result = 0, 0
		}
		first := "-"
		if result != 0 && ok {
			first = string(result)
		}
		if got := fmt.Sprint(kind, " ", serial, " ", first, " ", ok); got != want {
			t.Errorf("%s: %s, want %s", frame, got, want)
		}
	}
	var result signResult
	if err := decodeAnswer(answer{[]byte(`{"type":"reply","serial":7,"result":{"headers":[["A","b"]]}}`), '{'}, &result); err != nil ||
		len(*result.Headers) != 1 || *(*result.Headers)[0][1] != "b" {
		t.Fatal(result, err)
	}
	err := decodeAnswer(answer{[]byte(`{"type":"error","serial":7,"error":"Expired","message":"log in"}`), 0}, &result)
	if !errors.Is(err, ErrExpired) || err.Error() != "log in" {
		t.Fatal(err)
	}
}

func TestSessionsAndLogoutsNameTheirAccount(t *testing.T) {
	var status SessionStatus
	if err := json.Unmarshal([]byte(`{"group":"g","account":"admin","isDefault":true,"state":"valid"}`), &status); err != nil ||
		status.Account != "admin" || !status.IsDefault {
		t.Fatalf("%+v %v", status, err)
	}
	var out LogoutResult
	data := `{"loggedOut":["g"],"sessions":[{"group":"g","account":"default"},{"group":"g","account":"admin"}],"revoked":false,` +
		`"notRevoked":[{"group":"g","account":"admin","reason":"r","refreshToken":true}]}`
	if err := json.Unmarshal([]byte(data), &out); err != nil || fmt.Sprint(out.Sessions) != "[{g default} {g admin}]" ||
		out.NotRevoked[0].Account != "admin" {
		t.Fatalf("%+v %v", out, err)
	}
	for _, broken := range []string{`{"loggedOut":[],"sessions":[{"group":"g"}]}`, `{"loggedOut":[],"sessions":[{"group":"g","account":1}]}`} {
		if err := json.Unmarshal([]byte(broken), &out); err == nil {
			t.Errorf("%s: read", broken)
		}
	}
	if err := json.Unmarshal([]byte(`{"group":"g","state":"valid","isDefault":"yes"}`), &status); err == nil {
		t.Error("isDefault must be true or false")
	}
}
