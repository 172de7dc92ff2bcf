package msso

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"time"
)

// Where a verb takes a group, "" means the daemon's default: the only configured group, or the
// only one this program is registered for. Each verb about one session acts as the client's
// Account (a SignRequest's or TokenRequest's, when it names one).

type groupArgs struct {
	Group   string `json:"group,omitempty"`
	Account string `json:"account,omitempty"`
}

// Ping is a round trip that touches no state: data comes back.
func (c *Client) Ping(ctx context.Context, data string) (string, error) {
	var result pingResult
	if err := c.Call(ctx, methodPing, map[string]string{"data": data}, &result); err != nil {
		return "", err
	}
	return *result.Data, nil
}

// Status describes the sessions of every account of the named group, or of every group this
// program may use (each SessionStatus with its Account).
func (c *Client) Status(ctx context.Context, group string) (*Status, error) {
	var result Status
	if err := c.Call(ctx, methodStatus, groupArgs{Group: group}, &result); err != nil {
		return nil, err
	}
	return &result, nil
}

// Check is the group's session. A missing or expired session is a State, not an error.
func (c *Client) Check(ctx context.Context, group string) (*SessionStatus, error) {
	return c.session(ctx, methodCheck, groupArgs{group, c.account()}, c.timeout())
}

// Extend slides the group's session window (call it while the user is active).
func (c *Client) Extend(ctx context.Context, group string) (*SessionStatus, error) {
	return c.session(ctx, methodExtend, groupArgs{group, c.account()}, c.timeout())
}

func (c *Client) session(ctx context.Context, method string, args any, timeout time.Duration) (*SessionStatus, error) {
	var result SessionStatus
	if err := c.call(ctx, method, args, &result, timeout, nil); err != nil {
		return nil, err
	}
	return &result, nil
}

// SignRequest describes a request for Sign.
type SignRequest struct {
	Group string
	// Account is the group's account to sign as; "" means the client's (Client.Account).
	Account string
	Method  string // "" means GET
	URL     string
	// Header: the request's headers. Only Content-Type and Content-Digest cross the socket: the
	// only ones a profile covers besides those it adds.
	Header http.Header
	// Body is hashed here and only its SHA-256 is sent, for the profiles that cover it (RFC 9421).
	// BodySHA256 instead: the digest of a body you stream.
	Body       []byte
	BodySHA256 []byte
	// DPoPNonce: the DPoP-Nonce a server answered with (RFC 9449); the daemon keeps it for later
	// proofs to that origin.
	DPoPNonce string
}

type signArgs struct {
	Group      string      `json:"group,omitempty"`
	Account    string      `json:"account,omitempty"`
	Method     string      `json:"method"`
	URL        string      `json:"url"`
	Headers    [][2]string `json:"headers,omitempty"`
	BodySHA256 string      `json:"bodySHA256,omitempty"`
	DPoPNonce  string      `json:"dpopNonce,omitempty"`
}

// coverable are the request headers a signing profile may cover (RFC 9421 profiles).
var coverable = []string{"Content-Type", "Content-Digest"}

// Sign returns the headers that authenticate the described request, per the group's signing
// profile (bearer, header:NAME, DPoP, RFC 9421): add them to the request (Headers.Apply).
func (c *Client) Sign(ctx context.Context, r SignRequest) (Headers, error) {
	args := signArgs{Group: r.Group, Account: r.Account, Method: r.Method, URL: r.URL, DPoPNonce: r.DPoPNonce}
	if args.Account == "" {
		args.Account = c.account()
	}
	if args.Method == "" {
		args.Method = http.MethodGet
	}
	for _, name := range coverable {
		for _, value := range r.Header.Values(name) {
			args.Headers = append(args.Headers, [2]string{name, value})
		}
	}
	digest := r.BodySHA256
	if digest == nil && len(r.Body) > 0 {
		sum := sha256.Sum256(r.Body)
		digest = sum[:]
	}
	if digest != nil {
		args.BodySHA256 = base64.StdEncoding.EncodeToString(digest)
	}
	var result signResult
	if err := c.Call(ctx, methodSign, args, &result); err != nil {
		return nil, err
	}
	headers := make(Headers, len(*result.Headers))
	for i, pair := range *result.Headers {
		headers[i] = Header{Name: *pair[0], Value: *pair[1]}
	}
	return headers, nil
}

// TokenRequest describes the token asked for.
type TokenRequest struct {
	Group string
	// Account is the group's account whose token it is; "" means the client's (Client.Account).
	Account string
	// Resource is the absolute http(s) URL the token will be sent to; a group that names
	// `resources` refuses a token without one, or for a URL outside them (ErrResourceForbidden).
	Resource string
	// Renew refreshes the token first (a server refused it); at most once every 10 s per group.
	Renew bool
}

// Token returns the group's access token itself, for a program that cannot have each request
// signed. Only for groups whose tokens are bearer tokens (ErrForbidden for DPoP).
func (c *Client) Token(ctx context.Context, r TokenRequest) (*Token, error) {
	account := r.Account
	if account == "" {
		account = c.account()
	}
	args := struct {
		Group    string `json:"group,omitempty"`
		Account  string `json:"account,omitempty"`
		Resource string `json:"resource,omitempty"`
		Renew    bool   `json:"renew,omitempty"`
	}{r.Group, account, r.Resource, r.Renew}
	var result tokenResult
	if err := c.Call(ctx, methodToken, args, &result); err != nil {
		return nil, err
	}
	return &Token{AccessToken: *result.AccessToken, TokenType: *result.Header, Expiry: epoch(result.ExpiresAt)}, nil
}

// Login logs the user in with the password grant; the password crosses the socket once and is
// never stored.
func (c *Client) Login(ctx context.Context, group, username, password string) (*SessionStatus, error) {
	args := struct {
		Group    string `json:"group,omitempty"`
		Account  string `json:"account,omitempty"`
		Flow     string `json:"flow"`
		Username string `json:"username"`
		Password string `json:"password"`
	}{group, c.account(), "password", username, password}
	return c.session(ctx, methodLogin, args, c.timeout())
}

// LoginDevice logs the user in with the device grant (RFC 8628): prompt (nil: PrintDevicePrompt)
// is called, in this goroutine, with the address and code to show the user; LoginDevice returns
// once they approved (ErrLoginDenied if they did not). It waits as long as the daemon and ctx allow.
// A device or browser login of the group already waiting for the user is joined (prompt.Joined).
func (c *Client) LoginDevice(ctx context.Context, group string, prompt func(DevicePrompt)) (*SessionStatus, error) {
	if prompt == nil {
		prompt = PrintDevicePrompt
	}
	show := func(p *loginPrompt) {
		prompt(DevicePrompt{Group: p.group, VerificationURI: p.verificationURI, VerificationURIComplete: p.verificationURIComplete,
			UserCode: p.userCode, ExpiresAt: epoch(&p.expiresAt), Joined: p.joined})
	}
	var result SessionStatus
	if err := c.call(ctx, methodLogin, groupFlow{group, c.account(), "device"}, &result, -1, show); err != nil {
		return nil, err
	}
	return &result, nil
}

// LoginBrowser logs the user in through a browser on this machine (authorization code with PKCE
// and a loopback redirect): prompt (nil: OpenBrowser) gets the address to open; LoginBrowser
// returns once the browser came back.
func (c *Client) LoginBrowser(ctx context.Context, group string, prompt func(BrowserPrompt)) (*SessionStatus, error) {
	if prompt == nil {
		prompt = OpenBrowser
	}
	show := func(p *loginPrompt) {
		prompt(BrowserPrompt{Group: p.group, URL: p.url, ExpiresAt: epoch(&p.expiresAt), Joined: p.joined})
	}
	var result SessionStatus
	if err := c.call(ctx, methodLogin, groupFlow{group, c.account(), "browser"}, &result, -1, show); err != nil {
		return nil, err
	}
	return &result, nil
}

type groupFlow struct {
	Group   string `json:"group,omitempty"`
	Account string `json:"account,omitempty"`
	Flow    string `json:"flow"`
}

// PrintDevicePrompt shows a device login's address and code on standard error.
func PrintDevicePrompt(p DevicePrompt) {
	uri := p.VerificationURIComplete
	if uri == "" {
		uri = p.VerificationURI
	}
	if p.Joined {
		fmt.Fprintf(os.Stderr, "A login of %s is already waiting: open %s and enter the code %s\n", p.Group, uri, p.UserCode)
		return
	}
	fmt.Fprintf(os.Stderr, "To log in, open %s and enter the code %s\n", uri, p.UserCode)
}

// OpenBrowser shows a browser login's address on standard error and opens it with xdg-open,
// unless the login was joined (its window may be open already).
func OpenBrowser(p BrowserPrompt) {
	if p.Joined {
		fmt.Fprintf(os.Stderr, "A login of %s is already waiting for the browser: %s\n", p.Group, p.URL)
		return
	}
	fmt.Fprintf(os.Stderr, "To log in, open %s in a browser on this machine\n", p.URL)
	if command := exec.Command("xdg-open", p.URL); command.Start() == nil {
		go func() { _ = command.Wait() }()
	}
}

// Logout ends the session of the group's account for every app, and revokes its tokens at the
// identity provider.
func (c *Client) Logout(ctx context.Context, group string) (*LogoutResult, error) {
	return c.logout(ctx, groupArgs{group, c.account()})
}

// LogoutAll ends the session of every account of every group this program may use.
func (c *Client) LogoutAll(ctx context.Context) (*LogoutResult, error) {
	return c.logout(ctx, map[string]bool{"all": true})
}

func (c *Client) logout(ctx context.Context, args any) (*LogoutResult, error) {
	var result LogoutResult
	if err := c.Call(ctx, methodLogout, args, &result); err != nil {
		return nil, err
	}
	return &result, nil
}

// Keys returns the public half of the group's signing key (rotate: a new one). mssod answers it
// only to the user's own commands: a Go app gets ErrForbidden.
func (c *Client) Keys(ctx context.Context, group string, rotate bool) (*KeyDescription, error) {
	args := struct {
		Group  string `json:"group,omitempty"`
		Rotate bool   `json:"rotate,omitempty"`
	}{group, rotate}
	var result KeyDescription
	if err := c.Call(ctx, methodKeys, args, &result); err != nil {
		return nil, err
	}
	return &result, nil
}

// Apps returns the registrations in force, as JSON. The user's own commands only (ErrForbidden).
func (c *Client) Apps(ctx context.Context) (json.RawMessage, error) {
	var result json.RawMessage
	err := c.Call(ctx, methodApps, nil, &result)
	return result, err
}

// Diagnose returns the daemon's side of `msso doctor`, as JSON. The user's own commands only.
func (c *Client) Diagnose(ctx context.Context) (json.RawMessage, error) {
	var result json.RawMessage
	err := c.Call(ctx, methodDiagnose, nil, &result)
	return result, err
}

// AuditQuery selects audit entries: of a group, since a time, the newest Limit (0: the daemon's 1000).
type AuditQuery struct {
	Group string
	Since time.Time
	Limit int
}

// Audit returns the audit log, oldest first. The user's own commands only (ErrForbidden).
func (c *Client) Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	args := map[string]any{}
	if q.Group != "" {
		args["group"] = q.Group
	}
	if !q.Since.IsZero() {
		args["since"] = seconds(q.Since)
	}
	if q.Limit > 0 {
		args["limit"] = q.Limit
	}
	var result struct {
		Entries []AuditEntry `json:"entries"`
	}
	err := c.Call(ctx, methodAudit, args, &result)
	return result.Entries, err
}

// Lock locks the broker: nothing signs or hands out a token, for any app, until Unlock with the
// same passphrase.
func (c *Client) Lock(ctx context.Context, passphrase string) (*LockState, error) {
	return c.lock(ctx, methodLock, passphrase)
}

// Unlock lifts the lock. A wrong passphrase is answered late (up to a minute): ErrLocked.
func (c *Client) Unlock(ctx context.Context, passphrase string) (*LockState, error) {
	return c.lock(ctx, methodUnlock, passphrase)
}

func (c *Client) lock(ctx context.Context, method, passphrase string) (*LockState, error) {
	timeout := c.timeout()
	if timeout > 0 && timeout < slowTimeout {
		timeout = slowTimeout
	}
	var result LockState
	if err := c.call(ctx, method, map[string]string{"passphrase": passphrase}, &result, timeout, nil); err != nil {
		return nil, err
	}
	return &result, nil
}
