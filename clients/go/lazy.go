package msso

import "sync"

// lazyClient is the client of a Transport or TokenSource given none: made once, at first use.
type lazyClient struct {
	once   sync.Once
	client *Client
}

func (l *lazyClient) get(given *Client) *Client {
	if given != nil {
		return given
	}
	l.once.Do(func() { l.client = &Client{} })
	return l.client
}
