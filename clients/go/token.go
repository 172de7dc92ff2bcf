package msso

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Header is one header that authenticates a request. Its Value carries the token: printed with
// fmt (any verb) it shows as [redacted].
type Header struct {
	Name  string
	Value string
}

func (h Header) String() string { return h.Name + ": [redacted]" }
func (h Header) GoString() string {
	return fmt.Sprintf("msso.Header{Name: %q, Value: [redacted]}", h.Name)
}
func (h Header) Format(f fmt.State, _ rune) { writeRedacted(f, h) }

// Headers are what Sign returns: add them to the request (Apply). Printed with fmt they show
// their names only.
type Headers []Header

// Apply sets each header on h (replacing any of the same name).
func (hs Headers) Apply(h http.Header) {
	for _, header := range hs {
		h.Set(header.Name, header.Value)
	}
}

// Get returns the value of the named header (case-insensitive), or "".
func (hs Headers) Get(name string) string {
	for _, header := range hs {
		if strings.EqualFold(header.Name, name) {
			return header.Value
		}
	}
	return ""
}

func (hs Headers) String() string {
	names := make([]string, len(hs))
	for i, header := range hs {
		names[i] = header.Name
	}
	return "[" + strings.Join(names, " ") + "] (values redacted)"
}
func (hs Headers) GoString() string           { return "msso.Headers" + hs.String() }
func (hs Headers) Format(f fmt.State, _ rune) { writeRedacted(f, hs) }

// Token is a group's access token itself, for a program that cannot have each request signed.
// TokenType is the protocol's `header`: "Bearer" (send `Authorization: Bearer TOKEN`, as
// oauth2.Token does), or the header NAME of a `header:NAME` profile. Printed with fmt it shows
// its type and expiry, never AccessToken.
type Token struct {
	AccessToken string
	TokenType   string
	Expiry      time.Time
}

// SetAuthHeader sets the header that carries the token on r.
func (t *Token) SetAuthHeader(r *http.Request) {
	if t.TokenType == "Bearer" {
		r.Header.Set("Authorization", "Bearer "+t.AccessToken)
	} else {
		r.Header.Set(t.TokenType, t.AccessToken)
	}
}

func (t Token) String() string {
	return fmt.Sprintf("msso.Token{TokenType: %q, Expiry: %s, AccessToken: [redacted]}", t.TokenType,
		t.Expiry.Format(time.RFC3339))
}
func (t Token) GoString() string           { return t.String() }
func (t Token) Format(f fmt.State, _ rune) { writeRedacted(f, t) }

func writeRedacted(f fmt.State, v fmt.Stringer) {
	_, _ = f.Write([]byte(v.String()))
}

// TokenSource hands out a bearer group's access token, with the shape of golang.org/x/oauth2's
// TokenSource (without depending on it; wrap it in three lines, see the README). Each Token asks
// the broker, which caches and refreshes the token itself, so a logout is seen at the next call:
// do not wrap it in oauth2.ReuseTokenSource, which would keep a token past a logout.
type TokenSource struct {
	Client   *Client // nil: a client on the default socket, made at the first Token
	Group    string  // "" means the daemon's default: the only group this program may use
	Account  string  // the group's account; "" means the client's (Client.Account: $MSSO_ACCOUNT)
	Resource string  // the URL the token will be sent to; a group with `resources` needs one
	// Context bounds each call (nil: context.Background(), with the client's Timeout).
	Context context.Context

	client lazyClient
}

// Token returns the group's current access token.
func (s *TokenSource) Token() (*Token, error) {
	ctx := s.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return s.client.get(s.Client).Token(ctx, TokenRequest{Group: s.Group, Account: s.Account, Resource: s.Resource})
}
