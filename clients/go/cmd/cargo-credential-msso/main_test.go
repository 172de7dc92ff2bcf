package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"msso"
)

// fakeBroker answers as mssod would, and records what it was asked.
type fakeBroker struct {
	token    *msso.Token
	err      error
	status   msso.SessionStatus
	asked    []msso.TokenRequest
	logins   []string // "device GROUP", "browser GROUP"
	loginErr error
}

func (b *fakeBroker) Token(_ context.Context, r msso.TokenRequest) (*msso.Token, error) {
	b.asked = append(b.asked, r)
	return b.token, b.err
}

func (b *fakeBroker) Check(_ context.Context, group string) (*msso.SessionStatus, error) {
	status := b.status
	if group != "" {
		status.Group = group
	}
	return &status, nil
}

func (b *fakeBroker) LoginDevice(_ context.Context, group string, _ func(msso.DevicePrompt)) (*msso.SessionStatus, error) {
	b.logins = append(b.logins, "device "+group)
	return &msso.SessionStatus{Group: group, State: msso.StateValid, Username: "alice"}, b.loginErr
}

func (b *fakeBroker) LoginBrowser(_ context.Context, group string, _ func(msso.BrowserPrompt)) (*msso.SessionStatus, error) {
	b.logins = append(b.logins, "browser "+group)
	return &msso.SessionStatus{Group: group, State: msso.StateValid, Username: "alice"}, b.loginErr
}

// asAccount is the fake broker acting as an account (msso.Client.WithAccount): its logins say which.
type asAccount struct {
	*fakeBroker
	account string
}

func (b *asAccount) LoginDevice(ctx context.Context, group string, prompt func(msso.DevicePrompt)) (*msso.SessionStatus, error) {
	return b.fakeBroker.LoginDevice(ctx, group+" as "+b.account, prompt)
}

func (b *asAccount) LoginBrowser(ctx context.Context, group string, prompt func(msso.BrowserPrompt)) (*msso.SessionStatus, error) {
	return b.fakeBroker.LoginBrowser(ctx, group+" as "+b.account, prompt)
}

// converse runs the provider on the request lines; it returns every line it wrote after hello.
func converse(t *testing.T, b *fakeBroker, env map[string]string, requests ...string) []string {
	t.Helper()
	lines, _ := converseErr(t, b, env, requests...)
	return lines
}

// converseErr is converse, and what the provider wrote on standard error.
func converseErr(t *testing.T, b *fakeBroker, env map[string]string, requests ...string) ([]string, string) {
	t.Helper()
	var out, stderr bytes.Buffer
	p := &provider{broker: b, env: func(name string) string { return env[name] }, stderr: &stderr, desktop: func() bool { return false },
		as: func(account string) broker { return &asAccount{b, account} }}
	if err := serve(context.Background(), p, strings.NewReader(strings.Join(requests, "\n")+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if lines[0] != `{"v":[1]}` {
		t.Fatalf("hello: %q", lines[0])
	}
	return lines[1:], stderr.String()
}

const sparse = `"registry":{"index-url":"sparse+https://crates.example.com/index/","name":"example"}`

func get(args string) string {
	return `{"v":1,` + sparse + `,"kind":"get","operation":"read"` + args + `}`
}

func TestGetAnswersTheTokenAsTheAuthorizationHeaderUntilItExpires(t *testing.T) {
	expiry := time.Unix(1900000000, 0)
	b := &fakeBroker{token: &msso.Token{AccessToken: "tok", TokenType: "Bearer", Expiry: expiry}}
	lines := converse(t, b, map[string]string{"MSSO_GROUP": "from.env"},
		get(`,"args":["--group","com.example.suite"]`),
		`{"v":1,`+sparse+`,"kind":"get","operation":"publish","name":"probe","vers":"1.0.0","cksum":"abc"}`)
	want := `{"Ok":{"kind":"get","token":"Bearer tok","cache":"expires","expiration":1900000000,"operation_independent":true}}`
	if len(lines) != 2 || lines[0] != want || lines[1] != want {
		t.Fatalf("got %q, want twice %s", lines, want)
	}
	wantAsked := []msso.TokenRequest{{Group: "com.example.suite", Resource: "https://crates.example.com/index/"},
		{Group: "from.env", Resource: "https://crates.example.com/index/"}}
	if len(b.asked) != 2 || b.asked[0] != wantAsked[0] || b.asked[1] != wantAsked[1] {
		t.Fatalf("asked %+v, want %+v", b.asked, wantAsked)
	}

	// Without an expiry, cargo must not keep it at all; a header:Authorization group's is bare.
	b.token = &msso.Token{AccessToken: "tok", TokenType: "authorization"}
	if got := converse(t, b, nil, get(""))[0]; got != `{"Ok":{"kind":"get","token":"tok","cache":"never","operation_independent":true}}` {
		t.Fatal(got)
	}
	// Another header: cargo cannot send it.
	b.token = &msso.Token{AccessToken: "tok", TokenType: "X-Api-Key"}
	if got := errorOf(t, converse(t, b, nil, get(""))[0]); got.Kind != "other" || !strings.Contains(got.Message, "X-Api-Key") {
		t.Fatalf("%+v", got)
	}
}

func errorOf(t *testing.T, line string) failure {
	t.Helper()
	var answer struct {
		Ok  json.RawMessage
		Err *failure
	}
	if err := json.Unmarshal([]byte(line), &answer); err != nil || answer.Err == nil || answer.Ok != nil {
		t.Fatalf("not an error: %s", line)
	}
	return *answer.Err
}

func TestGetFailuresSayWhatToDo(t *testing.T) {
	notLoggedIn := &msso.Error{Name: "NotLoggedIn", Message: "not logged in to com.example.suite: run `msso login --group com.example.suite`"}
	for _, c := range []struct {
		err          error
		kind, phrase string
	}{
		{notLoggedIn, "not-found", "msso login --group com.example.suite"},
		{&msso.Error{Name: "Expired", Message: "the session of com.example.suite expired; run `msso login --group com.example.suite`"}, "not-found", "cargo login --registry example"},
		{&msso.Error{Name: "NotEntitled", Message: "/usr/bin/x is not registered for com.example.suite: `msso apps allow`"}, "other", "msso apps allow"},
		{&msso.Error{Name: "ResourceForbidden", Message: "com.example.suite's tokens are only for https://elsewhere/"}, "url-not-supported", "elsewhere"},
		{&msso.Error{Name: "BrokerUnreachable", Message: "nothing answers on /run/user/1000/msso/broker.sock"}, "other", "nothing answers"},
	} {
		lines, stderr := converseErr(t, &fakeBroker{err: c.err}, nil, get(""))
		got := errorOf(t, lines[0])
		if got.Kind != c.kind || !strings.Contains(got.Message, c.phrase) {
			t.Errorf("%v: %+v", c.err, got)
		}
		// cargo shows the message of "other" only: the others' go on standard error too.
		if noted := strings.Contains(stderr, c.phrase); noted != (c.kind != "other") {
			t.Errorf("%v: standard error %q", c.err, stderr)
		}
	}
	// Not an http(s) registry: not msso's, without asking the broker.
	b := &fakeBroker{}
	got := errorOf(t, converse(t, b, nil, `{"v":1,"registry":{"index-url":"ssh://git@example.com/index"},"kind":"get","operation":"read"}`)[0])
	if got.Kind != "url-not-supported" || len(b.asked) != 0 {
		t.Fatalf("%+v %v", got, b.asked)
	}
	for request, phrase := range map[string]string{
		get(`,"args":["--frobnicate"]`):            "--group GROUP",
		`{"v":2,` + sparse + `,"kind":"get"}`:      "version 1",
		`{"v":1,` + sparse + `,"kind":"teleport"}`: "teleport",
		`not json`: "cannot read",
		get(`,"args":["--group","g","--device","--browser"]`): "one of",
	} {
		if got := errorOf(t, converse(t, &fakeBroker{}, nil, request)[0]); !strings.Contains(got.Message, phrase) {
			t.Errorf("%s: %+v", request, got)
		}
	}
}

func TestLoginLogsTheGroupInAndLogoutIsMssos(t *testing.T) {
	login := func(args string) string { return `{"v":1,` + sparse + `,"kind":"login"` + args + `}` }
	b := &fakeBroker{status: msso.SessionStatus{State: msso.StateNotLoggedIn}}
	lines := converse(t, b, nil, login(`,"args":["--group","g"]`), login(`,"args":["--group","g","--browser"]`))
	if lines[0] != `{"Ok":{"kind":"login"}}` || lines[1] != lines[0] || strings.Join(b.logins, ",") != "device g,browser g" {
		t.Fatalf("%q %q", lines, b.logins)
	}
	b = &fakeBroker{status: msso.SessionStatus{State: msso.StateValid}}
	if converse(t, b, nil, login(""))[0] != `{"Ok":{"kind":"login"}}` || len(b.logins) != 0 {
		t.Fatal("logged in already: nothing to do")
	}
	got := errorOf(t, converse(t, b, nil, login(`,"token":"pasted","args":["--group","g"]`))[0])
	if got.Kind != "operation-not-supported" || !strings.Contains(got.Message, "`msso login --group g`") ||
		!strings.Contains(got.Message, "cargo login --registry example") {
		t.Fatalf("%+v", got)
	}
	b = &fakeBroker{status: msso.SessionStatus{Group: "the.default", State: msso.StateValid}}
	got = errorOf(t, converse(t, b, nil, `{"v":1,`+sparse+`,"kind":"logout"}`)[0])
	if got.Kind != "operation-not-supported" || !strings.Contains(got.Message, "`msso logout --group the.default`") {
		t.Fatalf("%+v", got)
	}
}

func TestARegistryIsNamedAsItsIndexURL(t *testing.T) {
	for index, want := range map[string]string{
		"sparse+https://crates.example.com/index/": "https://crates.example.com/index/",
		"sparse+http://127.0.0.1:8080/":            "http://127.0.0.1:8080/",
		"https://github.com/example/index":         "https://github.com/example/index",
		"sparse+https://crates.example.com":        "https://crates.example.com/",
		"ssh://git@example.com/index":              "",
		"sparse+https://user@crates.example.com/":  "",
		"file:///srv/index":                        "",
		"":                                         "",
	} {
		got, ok := resourceOf(index)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", index, got, ok, want)
		}
	}
}

func TestTheAccountComesFromTheArgumentsElseTheEnvironment(t *testing.T) {
	b := &fakeBroker{token: &msso.Token{AccessToken: "tok", TokenType: "Bearer"}}
	converse(t, b, map[string]string{"MSSO_ACCOUNT": "from-env"},
		get(`,"args":["--group","g","--account","admin"]`), get(`,"args":["--group","g"]`))
	converse(t, b, nil, get(`,"args":["--group","g"]`))
	var accounts []string
	for _, asked := range b.asked {
		accounts = append(accounts, asked.Account)
	}
	if strings.Join(accounts, ",") != "admin,from-env," {
		t.Fatalf("asked %+v", b.asked)
	}
	// A login logs that account in; the sentences name it.
	login := func(args string) string { return `{"v":1,` + sparse + `,"kind":"login"` + args + `}` }
	b = &fakeBroker{status: msso.SessionStatus{State: msso.StateNotLoggedIn}}
	lines := converse(t, b, nil, login(`,"args":["--group","g","--account","admin"]`), login(`,"args":["--group","g"]`))
	if lines[0] != `{"Ok":{"kind":"login"}}` || strings.Join(b.logins, ",") != "device g as admin,device g" {
		t.Fatalf("%q %q", lines, b.logins)
	}
	got := errorOf(t, converse(t, b, nil, login(`,"token":"pasted","args":["--group","g","--account","admin"]`))[0])
	if !strings.Contains(got.Message, "`msso login --group g --account admin`") {
		t.Fatalf("%+v", got)
	}
}
