package msso

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// Transport is an http.RoundTripper that has the broker sign every request: bearer, header:NAME,
// DPoP (RFC 9449) or RFC 9421 signatures, whatever the group's profile is, with no change to the
// application's code.
//
//	http := &http.Client{Transport: &msso.Transport{Group: "com.example.suite"}}
//
// The request's body is hashed for the profiles that cover it (only its SHA-256 crosses the
// socket), from GetBody when the request has one, else read into memory. A 401 carrying
// DPoP-Nonce (RFC 9449 §9) is signed once more with the server's nonce and sent again; a new
// nonce that comes with any other answer goes into the next proof to that origin. Each redirect
// that http.Client follows comes back here as a request of its own, and is signed for its own URL.
type Transport struct {
	Client  *Client           // the broker; nil: a client on the default socket, made at the first request
	Group   string            // "" means the daemon's default: the only group this program may use
	Account string            // the group's account; "" means the client's (Client.Account: $MSSO_ACCOUNT)
	Base    http.RoundTripper // what sends the signed requests; nil: http.DefaultTransport

	client lazyClient
	nonces nonces
}

// RoundTrip signs the request, sends it, and once more with the server's DPoP nonce if it asks.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	client := t.client.get(t.Client)
	origin := originOf(req.URL)
	sign := SignRequest{Group: t.Group, Account: t.Account, Method: req.Method, URL: req.URL.String(), Header: req.Header,
		BodySHA256: body.digest, DPoPNonce: t.nonces.take(origin)}
	headers, err := client.Sign(req.Context(), sign)
	if err != nil {
		body.close() // a RoundTripper closes the body, even on an error
		return nil, err
	}
	response, err := t.base().RoundTrip(signed(req, headers, body, body.first()))
	if err != nil {
		return nil, err
	}
	if nonce := response.Header.Get("DPoP-Nonce"); response.StatusCode == http.StatusUnauthorized && nonce != "" {
		again, err := body.again()
		if err != nil {
			return response, nil // the body cannot be sent twice: the application sees the 401
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(response.Body, 1<<16)) // so that the connection is reused
		response.Body.Close()
		sign.DPoPNonce = nonce
		if headers, err = client.Sign(req.Context(), sign); err != nil {
			if again != nil {
				again.Close()
			}
			return nil, err
		}
		t.nonces.gave(origin, nonce)
		if response, err = t.base().RoundTrip(signed(req, headers, body, again)); err != nil {
			return nil, err
		}
	}
	t.nonces.seen(origin, response.Header.Get("DPoP-Nonce"))
	return response, nil
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// signed is a copy of req with the broker's headers and the given body (a RoundTripper must
// not change the request it was given).
func signed(req *http.Request, headers Headers, body *requestBody, reader io.ReadCloser) *http.Request {
	out := req.Clone(req.Context())
	headers.Apply(out.Header)
	out.Body = reader
	if body.data != nil {
		// Read into memory, its length is known now: sent with Content-Length rather than
		// chunked, and the transport may send it again on a new connection.
		out.ContentLength = int64(len(body.data))
		out.GetBody = body.again
	}
	return out
}

// requestBody is what RoundTrip knows of a request's body: its digest, and how to send it.
type requestBody struct {
	digest   []byte
	original io.ReadCloser                 // sent first, when GetBody can make it again
	get      func() (io.ReadCloser, error) // a fresh copy
	data     []byte                        // or the body read into memory
	none     bool
}

func readBody(req *http.Request) (*requestBody, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return &requestBody{none: true}, nil
	}
	if req.GetBody != nil {
		reader, err := req.GetBody()
		if err != nil {
			req.Body.Close()
			return nil, err
		}
		hash := sha256.New()
		n, err := io.Copy(hash, reader)
		reader.Close()
		if err != nil {
			req.Body.Close()
			return nil, err
		}
		body := &requestBody{original: req.Body, get: req.GetBody}
		if n > 0 {
			body.digest = hash.Sum(nil)
		}
		return body, nil
	}
	data, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	body := &requestBody{data: data}
	if len(data) > 0 {
		sum := sha256.Sum256(data)
		body.digest = sum[:]
	}
	return body, nil
}

func (b *requestBody) first() io.ReadCloser {
	switch {
	case b.none:
		return nil
	case b.original != nil:
		return b.original
	}
	return io.NopCloser(bytes.NewReader(b.data))
}

func (b *requestBody) close() {
	if b.original != nil {
		b.original.Close()
	}
}

func (b *requestBody) again() (io.ReadCloser, error) {
	switch {
	case b.none:
		return nil, nil
	case b.get != nil:
		return b.get()
	}
	return io.NopCloser(bytes.NewReader(b.data)), nil
}

func originOf(u *url.URL) string {
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// nonces keeps the DPoP nonces servers sent with answers that needed no retry (a new one with a
// 200, RFC 9449 §8.2), per origin, until the next Sign for that origin hands them to the broker,
// which then keeps them for every app of the group.
type nonces struct {
	mu    sync.Mutex
	fresh map[string]string // origin → a nonce the broker has not been given
	last  map[string]string // origin → the last nonce this Transport gave it
}

func (n *nonces) take(origin string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	nonce, ok := n.fresh[origin]
	if ok {
		delete(n.fresh, origin)
		n.remember(origin, nonce)
	}
	return nonce
}

func (n *nonces) seen(origin, nonce string) {
	if nonce == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.last[origin] != nonce {
		if n.fresh == nil {
			n.fresh = map[string]string{}
		}
		n.fresh[origin] = nonce
	}
}

func (n *nonces) gave(origin, nonce string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.fresh, origin)
	n.remember(origin, nonce)
}

func (n *nonces) remember(origin, nonce string) {
	if n.last == nil {
		n.last = map[string]string{}
	}
	n.last[origin] = nonce
}
