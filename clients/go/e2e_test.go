//go:build e2e

// The library against the real daemon, keyring and identity provider, started by
// Tests/e2e/test_go_library.py, which builds this test binary (go test -c -tags e2e), registers
// it for the groups by its path (mssod refuses an unregistered program: that is the point) and
// runs each test with the broker's environment and:
//
//	MSSO_E2E_MSSO     the msso command, to act as another program would
//	MSSO_E2E_API      Tests/e2e/api_server.py's URL (the group profiles' tests)
//	MSSO_E2E_APPROVE  a command that approves a device code given as its last argument
//	MSSO_E2E_SECRETS  a file to which each token a test sees is appended, one a line
//	MSSO_E2E_PASSWORD alice's password
//	MSSO_E2E_HOSTILE  TestHostileReplies's cases (Tests/e2e/hostile_replies.py), as JSON, and
//	                  MSSO_E2E_HOSTILE_OUT the file it writes what the library made of each to
package msso_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"msso"
)

const (
	group  = "com.example.suite"
	dpop   = "com.example.dpop"
	signed = "com.example.signed"
)

var ctx = context.Background()

func env(t *testing.T, name string) string {
	value := os.Getenv(name)
	if value == "" {
		t.Fatalf("$%s is not set: run this through Tests/e2e/test_go_library.py", name)
	}
	return value
}

// secret records a token for the suite's last test, which checks that none reached a daemon log.
func secret(t *testing.T, values ...string) {
	file, err := os.OpenFile(env(t, "MSSO_E2E_SECRETS"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, value := range values {
		if value = strings.TrimPrefix(strings.TrimPrefix(value, "Bearer "), "DPoP "); value != "" {
			fmt.Fprintln(file, value)
		}
	}
}

func recordHeaders(t *testing.T, headers msso.Headers) msso.Headers {
	for _, header := range headers {
		secret(t, header.Value)
	}
	return headers
}

func run(t *testing.T, args ...string) {
	t.Helper()
	command := exec.Command(env(t, "MSSO_E2E_MSSO"), args...)
	if strings.HasPrefix(strings.Join(args, " "), "login") {
		command.Stdin = strings.NewReader(env(t, "MSSO_E2E_PASSWORD") + "\n")
	}
	if out, err := command.CombinedOutput(); err != nil {
		t.Fatalf("msso %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func loggedIn(t *testing.T, group string) {
	run(t, "login", "--group", group, "--username", "alice", "--password-stdin")
}

func errorOf(t *testing.T, err error, want *msso.Error, status int) *msso.Error {
	t.Helper()
	var got *msso.Error
	if !errors.As(err, &got) || !errors.Is(err, want) || got.ExitStatus() != status || got.Message == "" {
		t.Fatalf("want %s (exit status %d) with the daemon's sentence, got %#v", want.Name, status, err)
	}
	return got
}

func TestHelloSaysHowTheDaemonSeesThisProgram(t *testing.T) {
	client := &msso.Client{Name: "go e2e"}
	defer client.Close()
	hello, err := client.Hello(ctx)
	if err != nil {
		t.Fatal(err)
	}
	executable, _ := os.Executable()
	executable, _ = filepath.EvalSymlinks(executable)
	if hello.Version != 1 || !strings.HasPrefix(hello.Daemon, "mssod ") || hello.Peer.PID != os.Getpid() ||
		hello.Peer.UID != os.Getuid() || hello.Peer.Executable != executable {
		t.Fatalf("%+v; this program is %s", hello, executable)
	}
	data := strings.Repeat("x", 1000)
	if got, err := client.Ping(ctx, data); err != nil || got != data {
		t.Fatal(got, err)
	}
}

func TestEveryVerb(t *testing.T) {
	client := &msso.Client{}
	defer client.Close()
	if _, err := client.Logout(ctx, ""); err != nil {
		t.Fatal(err)
	}
	status, err := client.Status(ctx, "")
	if err != nil || len(status.Groups) != 1 || status.Groups[0].Group != group || status.Groups[0].State != msso.StateNotLoggedIn {
		t.Fatalf("%+v %v", status, err)
	}
	signing := msso.SignRequest{URL: "https://api.example.com/items?x=1"}
	refused := errorOf(t, func() error { _, err := client.Sign(ctx, signing); return err }(), msso.ErrNotLoggedIn, 2)
	if !strings.Contains(refused.Message, "msso login") {
		t.Fatalf("the sentence says what to do: %s", refused.Message)
	}
	errorOf(t, func() error { _, err := client.Extend(ctx, ""); return err }(), msso.ErrNotLoggedIn, 2)

	before := time.Now()
	session, err := client.Login(ctx, group, "alice", env(t, "MSSO_E2E_PASSWORD"))
	if err != nil || session.State != msso.StateValid || session.Username != "alice" ||
		session.LoggedInAt.Before(before.Add(-time.Second)) ||
		session.SessionExpiresAt.Sub(session.LoggedInAt).Round(time.Second) != 30*time.Minute ||
		session.SessionMaxAt.Sub(session.LoggedInAt).Round(time.Second) != 12*time.Hour {
		t.Fatalf("%+v %v", session, err)
	}
	if checked, err := client.Check(ctx, ""); err != nil || checked.State != msso.StateValid || checked.Issuer != session.Issuer {
		t.Fatalf("%+v %v", checked, err)
	}
	if extended, err := client.Extend(ctx, group); err != nil || extended.SessionExpiresAt.Before(session.SessionExpiresAt) {
		t.Fatalf("%+v %v", extended, err)
	}

	headers, err := client.Sign(ctx, signing)
	if err != nil || len(headers) != 1 || !strings.HasPrefix(headers.Get("Authorization"), "Bearer ") {
		t.Fatalf("%v %v", headers, err)
	}
	recordHeaders(t, headers)
	if strings.Contains(fmt.Sprintf("%v %+v %#v %s", headers, headers, headers, headers), headers[0].Value[7:]) {
		t.Fatal("printed headers show the token")
	}
	body := msso.SignRequest{Group: group, Method: "POST", URL: "https://api.example.com/items",
		Header: http.Header{"Content-Type": {"application/json"}, "Cookie": {"not sent"}}, Body: []byte(`{"a": 1}`)}
	if headers, err := client.Sign(ctx, body); err != nil || len(headers) != 1 {
		t.Fatalf("%v %v", headers, err)
	} else {
		recordHeaders(t, headers)
	}

	token, err := client.Token(ctx, msso.TokenRequest{})
	if err != nil || token.TokenType != "Bearer" || time.Until(token.Expiry) < time.Minute || token.AccessToken == "" {
		t.Fatalf("%v %v", token, err)
	}
	secret(t, token.AccessToken)
	if token.AccessToken != headers[0].Value[len("Bearer "):] {
		t.Fatal("sign and token hand out the same token")
	}
	if strings.Contains(fmt.Sprintf("%v %+v %#v %s", token, token, *token, token), token.AccessToken) {
		t.Fatal("a printed token shows itself")
	}
	renewed, err := client.Token(ctx, msso.TokenRequest{Group: group, Renew: true})
	if err != nil || renewed.AccessToken == "" {
		t.Fatal(err)
	}
	secret(t, renewed.AccessToken)

	// Errors, each named, with the daemon's sentence and the msso command's exit status.
	errorOf(t, func() error { _, err := client.Check(ctx, "com.example.nope"); return err }(), msso.ErrUnknownGroup, 64)
	errorOf(t, client.Call(ctx, "frobnicate", nil, nil), msso.ErrUnknownMethod, 64)
	bad := errorOf(t, client.Call(ctx, "sign", map[string]string{"url": "https://a.example/"}, nil), msso.ErrBadRequest, 64)
	if !strings.Contains(bad.Message, "method") {
		t.Fatal(bad.Message)
	}
	errorOf(t, client.Call(ctx, "hello", map[string]int{"version": 1}, nil), msso.ErrBadRequest, 64)
	wrong := errorOf(t, func() error { _, err := client.Login(ctx, "", "alice", "not-the-password"); return err }(),
		msso.ErrInvalidCredentials, 6)
	if strings.Contains(fmt.Sprintf("%v %#v", wrong, wrong), "not-the-password") {
		t.Fatal("the error shows the password")
	}
	// The user's own commands only: this program is an app.
	for _, call := range []func() error{
		func() error { _, err := client.Apps(ctx); return err },
		func() error { _, err := client.Audit(ctx, msso.AuditQuery{Limit: 1}); return err },
		func() error { _, err := client.Diagnose(ctx); return err },
		func() error { _, err := client.Keys(ctx, "", false); return err },
	} {
		errorOf(t, call(), msso.ErrForbidden, 7)
	}

	out, err := client.Logout(ctx, "")
	if err != nil || fmt.Sprint(out.LoggedOut) != "["+group+"]" || !out.Revoked {
		t.Fatalf("%+v %v", out, err)
	}
	if out, err := client.LogoutAll(ctx); err != nil || len(out.LoggedOut) != 0 || out.Revoked {
		t.Fatalf("nothing more to log out: %+v %v", out, err)
	}
	if got, err := client.Ping(ctx, "still here"); err != nil || got != "still here" {
		t.Fatal("the connection is still fine after all those errors", err)
	}
}

func TestSignalsArriveAsTheCommandLogsInAndOut(t *testing.T) {
	client := &msso.Client{}
	if _, err := client.Logout(ctx, ""); err != nil {
		t.Fatal(err)
	}
	subscription, err := client.Subscribe(ctx)
	if err != nil || fmt.Sprint(subscription.Groups) != "["+group+"]" {
		t.Fatalf("%v %v", subscription, err)
	}
	next := func() msso.Event {
		select {
		case event, ok := <-subscription.Events():
			if !ok {
				t.Fatalf("the subscription ended: %v", subscription.Err())
			}
			return event
		case <-time.After(5 * time.Second):
			t.Fatal("no signal within 5 s")
		}
		return msso.Event{}
	}
	loggedIn(t, group)
	if event := next(); event.Name != msso.EventLoggedIn || event.Group != group || event.Status.State != msso.StateValid ||
		event.Status.Username != "alice" {
		t.Fatalf("%+v", event)
	}
	run(t, "extend")
	run(t, "logout")
	if event := next(); event.Name != msso.EventExtended {
		t.Fatalf("%+v", event)
	}
	if event := next(); event.Name != msso.EventLoggedOut || event.Status.State != msso.StateNotLoggedIn {
		t.Fatalf("%+v", event)
	}
	client.Close()
	if _, open := <-subscription.Events(); open || subscription.Err() != nil {
		t.Fatalf("closing the client ends the subscription, without an error: %v", subscription.Err())
	}
	if _, err := client.Ping(ctx, "x"); !errors.Is(err, msso.ErrBrokerUnreachable) {
		t.Fatalf("a closed client: %v", err)
	}
}

func TestOneClientSharedByGoroutines(t *testing.T) {
	loggedIn(t, group)
	client := &msso.Client{}
	defer client.Close()
	subscription, err := client.Subscribe(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	tokens := map[string]bool{}
	for n := 0; n < 8; n++ {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				data := fmt.Sprintf("%d-%d", n, i)
				if got, err := client.Ping(ctx, data); err != nil || got != data {
					t.Errorf("%s: %q %v", data, got, err)
					return
				}
				headers, err := client.Sign(ctx, msso.SignRequest{URL: fmt.Sprintf("https://api.example.com/%d/%d", n, i)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				tokens[headers.Get("Authorization")] = true
				mu.Unlock()
			}
		}(n)
	}
	wg.Wait()
	for token := range tokens {
		secret(t, token)
	}
	if _, err := client.Extend(ctx, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case event := <-subscription.Events():
		if event.Name != msso.EventExtended {
			t.Fatalf("%+v", event)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Extended")
	}
}

// Two device logins at once, from two clients: the second joins the first (one login per group
// waits for the user), both are shown the one code, approved once.
func TestDeviceLoginsShowTheCodeAndWaitForApproval(t *testing.T) {
	client := &msso.Client{}
	defer client.Close()
	if _, err := client.Logout(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var prompts []msso.DevicePrompt
	approved := map[string]bool{}
	approve := func(p msso.DevicePrompt) {
		mu.Lock()
		prompts = append(prompts, p)
		first := !approved[p.UserCode]
		approved[p.UserCode] = true
		mu.Unlock()
		if first {
			// The second login has to be waiting before the approval: wait for it to join.
			waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(prompts) == 2 })
			argv := strings.Fields(env(t, "MSSO_E2E_APPROVE"))
			if out, err := exec.Command(argv[0], append(argv[1:], p.UserCode)...).CombinedOutput(); err != nil {
				t.Errorf("approving: %v %s", err, out)
			}
		}
	}
	results := make(chan *msso.SessionStatus, 2)
	go func() {
		other := &msso.Client{}
		defer other.Close()
		status, err := other.LoginDevice(ctx, "", approve)
		if err != nil {
			t.Error(err)
		}
		results <- status
	}()
	status, err := client.LoginDevice(ctx, group, approve)
	if err != nil || status.State != msso.StateValid {
		t.Fatalf("%+v %v", status, err)
	}
	if other := <-results; other == nil || other.State != msso.StateValid {
		t.Fatalf("%+v", other)
	}
	if len(prompts) != 2 || prompts[0].UserCode != prompts[1].UserCode || len(approved) != 1 ||
		prompts[0].Joined == prompts[1].Joined {
		t.Fatalf("one code, shown to both, the second joined: %+v", prompts)
	}
	for _, p := range prompts {
		if !strings.HasPrefix(p.VerificationURI, "http://127.0.0.1:") || time.Until(p.ExpiresAt) <= 0 || p.Group != group {
			t.Fatalf("%+v", p)
		}
	}
}

func waitFor(t *testing.T, condition func() bool) {
	for deadline := time.Now().Add(10 * time.Second); !condition(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("timed out")
			return
		}
	}
}

func TestLockRefusesEverySignUntilUnlock(t *testing.T) {
	loggedIn(t, group)
	client := &msso.Client{}
	defer client.Close()
	const passphrase = "go library passphrase"
	secret(t, passphrase)
	if state, err := client.Lock(ctx, passphrase); err != nil || !state.Locked || state.LockedAt.IsZero() {
		t.Fatalf("%+v %v", state, err)
	}
	_, err := client.Sign(ctx, msso.SignRequest{URL: "https://api.example.com/"})
	locked := errorOf(t, err, msso.ErrLocked, 8)
	if strings.Contains(locked.Error(), passphrase) {
		t.Fatal("the error shows the passphrase")
	}
	if status, err := client.Status(ctx, ""); err != nil || !status.Locked || !status.Groups[0].Locked {
		t.Fatalf("%+v %v", status, err)
	}
	if state, err := client.Unlock(ctx, passphrase); err != nil || state.Locked {
		t.Fatalf("%+v %v", state, err)
	}
	headers, err := client.Sign(ctx, msso.SignRequest{URL: "https://api.example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	recordHeaders(t, headers)
}

// -- the signing profiles, through net/http ----------------------------------------------------

type answer struct {
	User string `json:"user"`
	Path string `json:"path"`
	Body string `json:"body"`
}

// recorder is the Base of a Transport: it records every request's status and token.
type recorder struct {
	t        *testing.T
	mu       sync.Mutex
	statuses []int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	secret(r.t, req.Header.Get("Authorization"), req.Header.Get("DPoP"), req.Header.Get("Signature"))
	response, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.statuses = append(r.statuses, response.StatusCode)
		r.mu.Unlock()
	}
	return response, err
}

func get(t *testing.T, client *http.Client, method, url string, body []byte, contentType string) (int, answer) {
	t.Helper()
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	request, err := http.NewRequest(method, url, reader)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		request.Header.Set("Content-Type", contentType)
	}
	response, err := client.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	var got answer
	data, _ := io.ReadAll(response.Body)
	_ = json.Unmarshal(data, &got)
	if response.StatusCode != http.StatusOK {
		t.Logf("%s %s: %d %s", method, url, response.StatusCode, data)
	}
	return response.StatusCode, got
}

func TestBearerThroughTheTransportWithinTheGroupsResources(t *testing.T) {
	api := env(t, "MSSO_E2E_API")
	loggedIn(t, group)
	base := &recorder{t: t}
	client := &http.Client{Transport: &msso.Transport{Group: group, Base: base}}
	if status, got := get(t, client, "GET", api+"/items?page=2", nil, ""); status != 200 || got.User != "alice" || got.Path != "/items" {
		t.Fatalf("%d %+v", status, got)
	}
	if status, got := get(t, client, "POST", api+"/items", []byte(`{"a": 1}`), "application/json"); status != 200 || got.User != "alice" {
		t.Fatalf("%d %+v", status, got)
	}
	// Outside the group's resources nothing is signed, and the request is not sent.
	_, err := client.Get("http://127.0.0.1:9/elsewhere")
	refused := errorOf(t, err, msso.ErrResourceForbidden, 7)
	if !strings.Contains(refused.Message, api) || len(base.statuses) != 2 {
		t.Fatalf("%s; %d requests sent", refused.Message, len(base.statuses))
	}

	source := &msso.TokenSource{Group: group, Resource: api + "/"}
	token, err := source.Token()
	if err != nil || token.TokenType != "Bearer" {
		t.Fatal(token, err)
	}
	secret(t, token.AccessToken)
	request, _ := http.NewRequest("GET", api+"/from/a/token/source", nil)
	token.SetAuthHeader(request)
	response, err := http.DefaultClient.Do(request)
	if err != nil || response.StatusCode != 200 {
		t.Fatal(response, err)
	}
	response.Body.Close()
	if _, err := (&msso.TokenSource{Group: group}).Token(); !errors.Is(err, msso.ErrResourceForbidden) {
		t.Fatalf("a group with resources wants to know where the token goes: %v", err)
	}
}

// The server asks for its nonce with a 401 (RFC 9449 §9) and sends a new one with every 200: the
// transport pays one 401 for its first request, then keeps up with the new nonces.
func TestDPoPWithTheServersNonceThroughTheTransport(t *testing.T) {
	api := env(t, "MSSO_E2E_API")
	loggedIn(t, dpop)
	base := &recorder{t: t}
	client := &http.Client{Transport: &msso.Transport{Group: dpop, Base: base}}
	for n := 0; n < 3; n++ {
		if status, got := get(t, client, "GET", fmt.Sprintf("%s/dpop/items/%d?q=1", api, n), nil, ""); status != 200 || got.User != "alice" {
			t.Fatalf("%d %+v", status, got)
		}
	}
	if status, _ := get(t, client, "POST", api+"/dpop/items", []byte(`{"n": 1}`), "application/json"); status != 200 {
		t.Fatal(status)
	}
	if fmt.Sprint(base.statuses) != "[401 200 200 200 200]" {
		t.Fatalf("one 401, for the first request only: %v", base.statuses)
	}
}

func TestHTTPSignatureCoversTheBody(t *testing.T) {
	api := env(t, "MSSO_E2E_API")
	loggedIn(t, signed)
	base := &recorder{t: t}
	client := &http.Client{Transport: &msso.Transport{Group: signed, Base: base}}
	status, got := get(t, client, "POST", api+"/signed/items?x=1", []byte(`{"name": "x"}`), "application/json")
	if status != 200 || got.Body != `{"name": "x"}` {
		t.Fatalf("%d %+v", status, got)
	}
	// A body without GetBody (a plain reader) is read to be hashed, and sent all the same.
	request, _ := http.NewRequest("PUT", api+"/signed/items/1", io.MultiReader(strings.NewReader("pl"), strings.NewReader("ain")))
	request.Header.Set("Content-Type", "text/plain")
	response, err := client.Do(request)
	if err != nil || response.StatusCode != 200 {
		t.Fatal(response, err)
	}
	response.Body.Close()
	if status, _ := get(t, client, "GET", api+"/signed/items", nil, ""); status != 200 {
		t.Fatal(status)
	}
	// Signed for one body, sent with another: refused.
	broker := &msso.Client{}
	defer broker.Close()
	headers, err := broker.Sign(ctx, msso.SignRequest{Group: signed, Method: "POST", URL: api + "/signed/items",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"a": 1}`)})
	if err != nil {
		t.Fatal(err)
	}
	recordHeaders(t, headers)
	forged, _ := http.NewRequest("POST", api+"/signed/items", strings.NewReader(`{"a": 2}`))
	forged.Header.Set("Content-Type", "application/json")
	headers.Apply(forged.Header)
	response, err = http.DefaultClient.Do(forged)
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	data, _ := io.ReadAll(response.Body)
	if response.StatusCode != 401 || !strings.Contains(strings.ToLower(string(data)), "digest") {
		t.Fatalf("%d %s", response.StatusCode, data)
	}
}

// hostileCase is one case of Tests/e2e/hostile_replies.py, served on Socket by the test that runs
// this binary; hostileOutcome what the library made of it, which that test holds to what it must.
type hostileCase struct {
	Name, Socket, Verb string
	TimeoutMs          int
	Subscribed, Events bool
}

type hostileOutcome struct {
	Outcome      string `json:"outcome"` // "ok" or the *msso.Error's name
	Message      string `json:"message"`
	Events       *int   `json:"events"`
	Ended        string `json:"ended"`
	EndedMessage string `json:"endedMessage"`
	After        string `json:"after"`  // a ping's data after the case, or its error's name
	Memory       int64  `json:"memory"` // the peak resident memory over the case, less what it was before
}

// TestHostileReplies runs each case on a client of its own and records the outcome. Anything but
// an *msso.Error is recorded as such (a panic included: recovered, when the caller's goroutine
// has it; the library's own goroutines would end the binary, which the test sees too).
func TestHostileReplies(t *testing.T) {
	spec, err := os.ReadFile(env(t, "MSSO_E2E_HOSTILE"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []hostileCase
	if err := json.Unmarshal(spec, &cases); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]*hostileOutcome{}
	for _, c := range cases {
		resetPeakMemory(t)
		before := memory(t, "VmRSS")
		got := hostile(c)
		got.Memory = memory(t, "VmHWM") - before
		outcomes[c.Name] = got
	}
	out, _ := json.Marshal(outcomes)
	if err := os.WriteFile(env(t, "MSSO_E2E_HOSTILE_OUT"), out, 0o600); err != nil {
		t.Fatal(err)
	}
}

func hostile(c hostileCase) (got *hostileOutcome) {
	got = &hostileOutcome{Outcome: "ok"}
	defer func() {
		if p := recover(); p != nil {
			got.Outcome = fmt.Sprintf("panic: %v", p)
		}
	}()
	timeout := time.Duration(c.TimeoutMs) * time.Millisecond
	client := &msso.Client{SocketPath: c.Socket, Timeout: timeout}
	defer client.Close()
	name := func(err error) (string, string) {
		var refused *msso.Error
		if errors.As(err, &refused) {
			return refused.Name, refused.Message
		}
		return fmt.Sprintf("not an *msso.Error: %T %v", err, err), ""
	}
	var subscription *msso.Subscription
	if c.Subscribed {
		var err error
		if subscription, err = client.Subscribe(ctx); err != nil {
			got.Outcome, got.Message = name(err)
			return got
		}
	}
	var err error
	switch c.Verb {
	case "status":
		_, err = client.Status(ctx, "")
	case "check":
		_, err = client.Check(ctx, "")
	case "sign":
		_, err = client.Sign(ctx, msso.SignRequest{URL: "https://api.example.com/"})
	case "token":
		_, err = client.Token(ctx, msso.TokenRequest{})
	case "logout":
		_, err = client.Logout(ctx, "")
	case "subscribe":
		_, err = client.Subscribe(ctx)
	case "hello":
		_, err = client.Hello(ctx)
	case "login-device":
		login, cancel := context.WithTimeout(ctx, timeout) // logins wait as long as the daemon and ctx let them
		_, err = client.LoginDevice(login, "", func(msso.DevicePrompt) {})
		cancel()
	default:
		err = fmt.Errorf("no such verb: %s", c.Verb)
	}
	if err != nil {
		got.Outcome, got.Message = name(err)
	}
	if c.Events && subscription != nil {
		count := 0
		got.Events = &count
	drain:
		for {
			select {
			case _, open := <-subscription.Events():
				if !open {
					break drain
				}
				count++
			case <-time.After(2 * time.Second):
				break drain
			}
		}
		if err := subscription.Err(); err != nil {
			got.Ended, got.EndedMessage = name(err)
		}
	}
	if data, err := client.Ping(ctx, "after?"); err != nil {
		got.After, _ = name(err)
	} else {
		got.After = data
	}
	return got
}

// resetPeakMemory sets this process's VmHWM back to its resident memory (Linux 4.0 and later).
func resetPeakMemory(t *testing.T) {
	runtime.GC()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
}

// memory is a line of /proc/self/status (VmRSS, VmHWM), in bytes.
func memory(t *testing.T, key string) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == key+":" {
			kib, _ := strconv.ParseInt(fields[1], 10, 64)
			return kib * 1024
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}

// TestAccountsChooseTheirSession runs with alice logged in as the group's default account and bob
// as its account "admin" (Tests/e2e/test_accounts_clients.py). It writes each token it was handed,
// by how it asked, to $MSSO_E2E_ACCOUNTS_OUT (JSON), for the test to ask the IdP whose it is; a
// client that names no account acts as $MSSO_ACCOUNT says ("plain").
func TestAccountsChooseTheirSession(t *testing.T) {
	out, api := env(t, "MSSO_E2E_ACCOUNTS_OUT"), env(t, "MSSO_E2E_API")
	client, admin := &msso.Client{}, &msso.Client{Account: "admin"}
	defer client.Close()
	defer admin.Close()
	tokens := map[string]string{}
	take := func(name string, token *msso.Token, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		secret(t, token.AccessToken)
		tokens[name] = token.AccessToken
	}
	token, err := client.Token(ctx, msso.TokenRequest{})
	take("plain", token, err)
	token, err = admin.Token(ctx, msso.TokenRequest{})
	take("client admin", token, err)
	token, err = client.Token(ctx, msso.TokenRequest{Account: "admin"})
	take("request admin", token, err)
	token, err = admin.Token(ctx, msso.TokenRequest{Account: "default"})
	take("request default", token, err)
	token, err = client.WithAccount("admin").Token(ctx, msso.TokenRequest{})
	take("view admin", token, err)
	token, err = (&msso.TokenSource{Client: client, Account: "admin"}).Token()
	take("token source admin", token, err)
	headers, err := admin.Sign(ctx, msso.SignRequest{URL: "https://api.example.com/items"})
	if err != nil {
		t.Fatal(err)
	}
	recordHeaders(t, headers)
	tokens["sign admin"] = strings.TrimPrefix(headers.Get("Authorization"), "Bearer ")

	// Through the transport, to a server that asks the IdP whose token it got.
	for account, user := range map[string]string{"admin": "bob", "default": "alice"} {
		http := &http.Client{Transport: &msso.Transport{Client: client, Account: account}}
		if status, got := get(t, http, "GET", api+"/as/"+account, nil, ""); status != 200 || got.User != user {
			t.Fatalf("transport as %s: %d %+v", account, status, got)
		}
	}

	// The sessions say which account they are.
	checked, err := admin.Check(ctx, "")
	if err != nil || checked.Account != "admin" || checked.Username != "bob" || checked.IsDefault {
		t.Fatalf("%+v %v", checked, err)
	}
	status, err := client.Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]msso.SessionStatus{}
	for _, session := range status.Groups {
		listed[session.Account] = session
	}
	if listed["default"].Username != "alice" || !listed["default"].IsDefault || listed["admin"].Username != "bob" ||
		listed["admin"].IsDefault {
		t.Fatalf("every account is listed, the default one said: %+v", status.Groups)
	}
	data, _ := json.Marshal(tokens)
	if err := os.WriteFile(out, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
