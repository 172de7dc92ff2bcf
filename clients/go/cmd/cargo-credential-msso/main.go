// Command cargo-credential-msso is a cargo credential provider (cargo 1.74 and later) that answers
// with the access token of an msso group, for the registries the group's `resources` name. cargo
// runs it when its configuration names it for a registry:
//
//	[registries.example]
//	index = "sparse+https://crates.example.com/index/"
//	credential-provider = ["cargo-credential-msso", "--group", "com.example.suite"]
//
// It speaks cargo's credential provider protocol, version 1: cargo starts it with --cargo-plugin,
// it says hello ({"v":[1]}), and answers each request cargo writes on its standard input, one
// JSON object a line, with one line on its standard output. The arguments of the configuration
// arrive in the requests' "args".
//
//   - get (every operation: read, publish, yank, unyank, owners): the group's current access
//     token, as the value of the Authorization header ("Bearer TOKEN"; the bare token for a group
//     whose profile is header:Authorization), with "cache": "expires" at the token's expiry, so
//     that cargo keeps it in its memory only while it is valid (and never on disk: cargo stores
//     nothing a provider answers). The registry is named to the broker as the token's resource,
//     the index URL without "sparse+", so a group with `resources` answers only for its
//     registries; for any other the answer is "url-not-supported" (cargo tries its next
//     provider). Not logged in or expired: "not-found" (cargo tries its next provider, and
//     cargo login goes on to log in), with the daemon's sentence (run `msso login --group
//     GROUP`) on standard error too, since cargo shows the message of an "other" failure only.
//     Anything else (not registered, locked, no broker): "other", with the daemon's sentence.
//   - login (`cargo login --registry NAME`): logs the group in, with the flow `msso login` would
//     choose (a browser where there is a desktop, else a device code), its prompt on standard
//     error; --device or --browser (`cargo login --registry NAME -- --device`) choose. A token
//     given to cargo login is refused: the token comes from the identity provider.
//   - logout: "operation-not-supported", naming `msso logout`: the session is the group's, shared
//     by every app registered for it, and cargo holds nothing of it to forget.
//
// The group is --group GROUP (in the configuration's arguments), else $MSSO_GROUP, else the
// daemon's default (the only group this provider is registered for, or the only one configured);
// the group's account, --account NAME, else $MSSO_ACCOUNT, else the daemon's choice (the group's
// default account): a registry whose token is another account's names it,
//
//	credential-provider = ["cargo-credential-msso", "--group", "com.example.suite", "--account", "admin"]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"msso"
)

// The version of cargo's credential provider protocol this provider speaks (not msso's: that is
// msso.ProtocolVersion).
const protocolVersion = 1

// maxRequest bounds one request line (cargo's are a few hundred bytes, its 401's headers included).
const maxRequest = 1 << 20

func main() {
	if len(os.Args) < 2 || os.Args[1] != "--cargo-plugin" {
		fmt.Fprintln(os.Stderr, "usage: cargo-credential-msso --cargo-plugin (a cargo credential provider: name it in cargo's configuration,\n"+
			"  credential-provider = [\"cargo-credential-msso\", \"--group\", \"GROUP\"])")
		os.Exit(64)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM) // ends a login's wait
	client := &msso.Client{Name: "cargo-credential-msso"}
	p := &provider{broker: client, as: func(account string) broker { return client.WithAccount(account) }}
	err := serve(ctx, p, os.Stdin, os.Stdout)
	client.Close()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cargo-credential-msso:", err)
		os.Exit(70)
	}
}

// request is one of cargo's requests (cargo-credential's CredentialRequest, flattened).
type request struct {
	V         int      `json:"v"`
	Kind      string   `json:"kind"`
	Operation string   `json:"operation"`
	Registry  registry `json:"registry"`
	Token     *string  `json:"token"`     // login: given to cargo login (--token or standard input)
	LoginURL  string   `json:"login-url"` // login: where the registry says a token is had
	Args      []string `json:"args"`
}

type registry struct {
	IndexURL string   `json:"index-url"`
	Name     string   `json:"name"`
	Headers  []string `json:"headers"`
}

// response is one line of answer: {"Ok": …} or {"Err": …}.
type response struct {
	Ok  *success `json:"Ok,omitempty"`
	Err *failure `json:"Err,omitempty"`
}

type success struct {
	Kind                 string `json:"kind"`
	Token                string `json:"token,omitempty"`
	Cache                string `json:"cache,omitempty"`
	Expiration           int64  `json:"expiration,omitempty"`
	OperationIndependent *bool  `json:"operation_independent,omitempty"`
}

// failure kinds: url-not-supported and not-found let cargo try its next provider; the others end
// the request, and cargo shows message and caused-by.
type failure struct {
	Kind     string   `json:"kind"`
	Message  string   `json:"message,omitempty"`
	CausedBy []string `json:"caused-by,omitempty"`
	// note: Message is also written on standard error (which cargo passes through), since cargo
	// (1.95 still) shows the message of an "other" failure only.
	note bool
}

func (f *failure) Error() string { return f.Message }

func other(message string, causes ...string) *failure {
	return &failure{Kind: "other", Message: message, CausedBy: causes}
}

// broker is what the provider asks of mssod (msso.Client; a fake in the unit tests).
type broker interface {
	Token(ctx context.Context, r msso.TokenRequest) (*msso.Token, error)
	Check(ctx context.Context, group string) (*msso.SessionStatus, error)
	LoginDevice(ctx context.Context, group string, prompt func(msso.DevicePrompt)) (*msso.SessionStatus, error)
	LoginBrowser(ctx context.Context, group string, prompt func(msso.BrowserPrompt)) (*msso.SessionStatus, error)
}

type provider struct {
	broker broker
	// as is the broker acting as an account of the group (msso.Client.WithAccount); nil: broker.
	as     func(account string) broker
	env    func(string) string // os.Getenv by default
	stderr io.Writer           // os.Stderr by default: cargo passes its own through
	// desktop says whether a browser can be opened here (the browser flow fits); nil: as msso decides.
	desktop func() bool
}

// serve says hello, then answers each request line until cargo closes standard input.
func serve(ctx context.Context, p *provider, stdin io.Reader, stdout io.Writer) error {
	out := bufio.NewWriter(stdout)
	if err := writeLine(out, map[string][]int{"v": {protocolVersion}}); err != nil {
		return err
	}
	lines := bufio.NewScanner(stdin)
	lines.Buffer(make([]byte, 0, 4096), maxRequest)
	for lines.Scan() {
		if strings.TrimSpace(lines.Text()) == "" {
			continue
		}
		if err := writeLine(out, p.answer(ctx, lines.Bytes())); err != nil {
			return err
		}
	}
	if err := lines.Err(); err != nil {
		return fmt.Errorf("reading cargo's request: %w", err)
	}
	return nil
}

func writeLine(out *bufio.Writer, value any) error {
	encoder := json.NewEncoder(out) // one line, with its newline
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(value); err != nil {
		return err
	}
	return out.Flush()
}

// answer is the response to one request line.
func (p *provider) answer(ctx context.Context, line []byte) response {
	var r request
	if err := json.Unmarshal(line, &r); err != nil {
		return response{Err: other("cargo-credential-msso: a request it cannot read", err.Error())}
	}
	if r.V != protocolVersion {
		return response{Err: other(fmt.Sprintf("cargo-credential-msso speaks version %d of cargo's credential protocol, not %d",
			protocolVersion, r.V))}
	}
	var ok *success
	var err error
	switch r.Kind {
	case "get":
		ok, err = p.get(ctx, &r)
	case "login":
		ok, err = p.login(ctx, &r)
	case "logout":
		err = p.logout(ctx, &r)
	default:
		err = &failure{Kind: "operation-not-supported", Message: fmt.Sprintf("cargo-credential-msso does not know the request %q", r.Kind), note: true}
	}
	var refused *failure
	switch {
	case err == nil:
		return response{Ok: ok}
	case errors.As(err, &refused):
		if refused.note && refused.Kind != "other" {
			fmt.Fprintln(p.errOut(), "cargo-credential-msso:", refused.Message)
		}
		return response{Err: refused}
	default:
		return response{Err: other(err.Error())}
	}
}

// options are the arguments of cargo's configuration (and of cargo login -- …), in the request.
type options struct {
	group, account  string
	device, browser bool
}

func (p *provider) options(r *request) (options, error) {
	var o options
	flags := flag.NewFlagSet("cargo-credential-msso", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.StringVar(&o.group, "group", "", "")
	flags.StringVar(&o.account, "account", "", "")
	flags.BoolVar(&o.device, "device", false, "")
	flags.BoolVar(&o.browser, "browser", false, "")
	if err := flags.Parse(r.Args); err != nil || flags.NArg() > 0 {
		return o, other(fmt.Sprintf("cargo-credential-msso: arguments %q: it takes --group GROUP, --account NAME (and, for cargo login, "+
			"--device or --browser)", r.Args))
	}
	if o.device && o.browser {
		return o, other("cargo-credential-msso: give one of --device and --browser")
	}
	if o.group == "" {
		o.group = p.getenv("MSSO_GROUP")
	}
	if o.account == "" {
		o.account = p.getenv("MSSO_ACCOUNT")
	}
	return o, nil
}

// brokerAs is the broker acting as the options' account.
func (p *provider) brokerAs(o options) broker {
	if o.account == "" || p.as == nil {
		return p.broker
	}
	return p.as(o.account)
}

func (p *provider) getenv(name string) string {
	if p.env != nil {
		return p.env(name)
	}
	return os.Getenv(name)
}

func (p *provider) errOut() io.Writer {
	if p.stderr != nil {
		return p.stderr
	}
	return os.Stderr
}

// get answers the group's current token, for cargo to send as the registry's Authorization header.
func (p *provider) get(ctx context.Context, r *request) (*success, error) {
	o, err := p.options(r)
	if err != nil {
		return nil, err
	}
	resource, ok := resourceOf(r.Registry.IndexURL)
	if !ok {
		return nil, &failure{Kind: "url-not-supported",
			Message: fmt.Sprintf("cargo-credential-msso answers for registries on http(s) only, not %s", r.Registry.IndexURL)}
	}
	token, err := p.broker.Token(ctx, msso.TokenRequest{Group: o.group, Account: o.account, Resource: resource})
	switch {
	case errors.Is(err, msso.ErrNotLoggedIn) || errors.Is(err, msso.ErrExpired):
		// No token to be had: "not-found", so that cargo login (which asks first) goes on to log in,
		// and cargo may try its next provider. The daemon's sentence says to run `msso login`.
		return nil, &failure{Kind: "not-found", Message: err.Error() + " (or `cargo login" + registryFlag(r) + "`)", note: true}
	case errors.Is(err, msso.ErrResourceForbidden):
		// Not one of the group's registries: another provider may have its token.
		return nil, &failure{Kind: "url-not-supported", Message: err.Error(), note: true}
	case err != nil:
		// The daemon's sentence says what to do: `msso apps allow …`, `msso unlock`, start mssod.
		return nil, other(err.Error())
	}
	authorization, err := authorizationOf(token)
	if err != nil {
		return nil, err
	}
	independent := true // the same token reads, publishes, yanks
	answer := &success{Kind: "get", Token: authorization, Cache: "never", OperationIndependent: &independent}
	if !token.Expiry.IsZero() {
		// cargo keeps it in memory, for this run only, until 60 s before this; then it asks again.
		answer.Cache, answer.Expiration = "expires", token.Expiry.Unix()
	}
	return answer, nil
}

// authorizationOf is the Authorization header's value that carries the token: cargo sends what a
// provider answers as that header's value, as it is.
func authorizationOf(token *msso.Token) (string, error) {
	switch {
	case token.TokenType == "Bearer":
		return "Bearer " + token.AccessToken, nil
	case strings.EqualFold(token.TokenType, "Authorization"): // sign = "header:Authorization": the bare token
		return token.AccessToken, nil
	}
	return "", other(fmt.Sprintf("this group's tokens go in the %s header (sign = \"header:%s\"), and cargo sends a registry's token only "+
		"as Authorization: give cargo a group whose sign is \"bearer\" or \"header:Authorization\"", token.TokenType, token.TokenType))
}

// resourceOf is the URL the token will be sent to: the registry's index (what cargo names it by)
// without sparse+. Only http(s) registries without user info; anything else is not for msso.
func resourceOf(index string) (string, bool) {
	u, err := url.Parse(strings.TrimPrefix(index, "sparse+"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return "", false
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String(), true
}

// login logs the group in (cargo login --registry NAME), unless its session is valid already.
func (p *provider) login(ctx context.Context, r *request) (*success, error) {
	o, err := p.options(r)
	if err != nil {
		return nil, err
	}
	if r.Token != nil && strings.TrimSpace(*r.Token) != "" {
		return nil, &failure{Kind: "operation-not-supported", Message: "cargo-credential-msso takes no token: the token is the identity " +
			"provider's, had by logging in. Run `cargo login" + registryFlag(r) + "` without one, or `" + mssoCommand("login", o.group, o.account) + "`",
			note: true}
	}
	b := p.brokerAs(o)
	status, err := b.Check(ctx, o.group)
	if err == nil && status.State == msso.StateValid {
		fmt.Fprintf(p.errOut(), "Already logged in to %s as %s (`%s` to end it)\n", status.Group, status.Username,
			mssoCommand("logout", status.Group, o.account))
		return &success{Kind: "login"}, nil
	}
	browser := o.browser || (!o.device && p.browserFits())
	if browser {
		status, err = b.LoginBrowser(ctx, o.group, nil)
	} else {
		status, err = b.LoginDevice(ctx, o.group, nil)
	}
	if err != nil {
		return nil, other(err.Error()) // the daemon's sentence (an *msso.Error's Error() is its Message)
	}
	fmt.Fprintf(p.errOut(), "Logged in to %s as %s\n", status.Group, status.Username)
	return &success{Kind: "login"}, nil
}

// browserFits is msso login's own choice: the browser where there is a desktop (a display, and
// xdg-open to open it), else the device flow, whose code can be approved on any device.
func (p *provider) browserFits() bool {
	if p.desktop != nil {
		return p.desktop()
	}
	if p.getenv("DISPLAY") == "" && p.getenv("WAYLAND_DISPLAY") == "" {
		return false
	}
	info, err := os.Stat("/usr/bin/xdg-open")
	return err == nil && info.Mode()&0o111 != 0
}

// logout is not this provider's to do: the group's session is every app's (git, kubectl, …), and
// cargo holds nothing of it to forget.
func (p *provider) logout(ctx context.Context, r *request) error {
	o, err := p.options(r)
	if err != nil {
		return err
	}
	group := o.group
	if group == "" { // the daemon's default: ask it which, to name it
		checking, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if status, err := p.brokerAs(o).Check(checking, ""); err == nil {
			group = status.Group
		}
	}
	return &failure{Kind: "operation-not-supported", Message: "cargo keeps no msso token to forget (it never stores one); " +
		"the session is msso's, shared by every app of the group: end it with `" + mssoCommand("logout", group, o.account) + "`", note: true}
}

// mssoCommand is the msso command that does verb for the group ("": the daemon's default) and
// its account ("": the group's default).
func mssoCommand(verb, group, account string) string {
	command := "msso " + verb
	if group != "" {
		command += " --group " + group
	}
	if account != "" {
		command += " --account " + account
	}
	return command
}

func registryFlag(r *request) string {
	if r.Registry.Name != "" {
		return " --registry " + r.Registry.Name
	}
	return ""
}
