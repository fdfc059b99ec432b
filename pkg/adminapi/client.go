package adminapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"syscall"
	"time"

	"github.com/relaymesh/relaymesh/pkg/fastopen"
	"github.com/relaymesh/relaymesh/pkg/linktls"
)

// Client reaches relays' admin APIs: over HTTPS on a fleet whose
// relay links are TLS (the relay's certificate must come from the fleet
// CA, and name the relay the request is for), over plain HTTP on a plain
// fleet.
//
// It never follows a redirect: its requests carry the fleet's admin token,
// and a relay (or whoever registered a relay's admin address) answering
// 3xx must neither have the token sent on (Go keeps it for another port of
// the same host) nor make this host fetch a URL of its choosing, a cloud
// metadata service say. A redirect is answered as what it is: a non-200
// status.
type Client struct {
	http           *http.Client
	scheme         string
	err            error         // every request fails with it (no way to verify relays)
	connectTimeout time.Duration // Get's connection bound (ConnectWithin); 0: none but the overall timeout
}

// NewClient returns a client over HTTPS verified with tlsConf
// (linktls.Identity.AdminClientConfig), or over plain HTTP when tlsConf is
// nil.
func NewClient(timeout time.Duration, tlsConf *tls.Config) *Client {
	return NewClientAllowing(timeout, tlsConf, nil)
}

// NewClientAllowing is NewClient whose every connection is first
// allowed by allow (a net.Dialer Control, e.g. a relay's relay policy: the
// registry's admin addresses are its writers' to choose, and must not turn
// a relay into a scanner of its own network). nil allows all.
func NewClientAllowing(timeout time.Duration, tlsConf *tls.Config, allow func(network, address string, rc syscall.RawConn) error) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: allow}).DialContext
	t.Proxy = nil // admin traffic goes to the relay, never through $HTTP(S)_PROXY
	// A plan over a large fleet asks hundreds of relays in one round and
	// some of them again a round later: their connections stay open for
	// it (Go's default keeps 100 idle connections in all, and a new one
	// costs a round trip more, two over TLS). At most 2 a relay, as Go's
	// default.
	t.MaxIdleConns = 0
	c := &Client{
		http: &http.Client{
			Timeout:       timeout,
			Transport:     t,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		scheme: "http",
	}
	if tlsConf != nil {
		t.TLSClientConfig = tlsConf
		// TCP Fast Open (pkg/fastopen): to a relay this host asked before,
		// the ClientHello rides in the SYN, and a new connection costs one
		// round trip before its request instead of two. Only over TLS (a
		// SYN's data may arrive twice). A kernel without it dials as ever.
		dial := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: func(network, address string, rc syscall.RawConn) error {
			if allow != nil {
				if err := allow(network, address, rc); err != nil {
					return err
				}
			}
			_ = fastopen.Dial(network, address, rc)
			return nil
		}}).DialContext
		t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return linktls.HTTPSClient(ctx, raw, tlsConf)
		}
		t.ForceAttemptHTTP2 = false
		c.scheme = "https"
	}
	return c
}

// FailingClient returns a client whose every request fails with err:
// for a caller that cannot verify relays (no fleet secret on a TLS fleet),
// so that the reason reaches whoever needed an admin API, and only them.
func FailingClient(err error) *Client {
	return &Client{err: err}
}

// URL is path (with its query) on the admin API at addr (host:port).
func (c *Client) URL(addr, path string) string {
	return c.scheme + "://" + addr + path
}

// Do sends req. name, when not empty, is the relay req is for: over HTTPS
// an answer from a relay of another name is refused (a registry entry
// pointing at the wrong relay), before anyone reads it.
func (c *Client) Do(req *http.Request, name string) (*http.Response, error) {
	if c.err != nil {
		return nil, c.err
	}
	var wrongPeer error
	if c.scheme == "https" && name != "" {
		// Whom the connection reaches is checked when the transport hands
		// it over, before the request (and its token) is written: a
		// registry entry pointing at another relay's admin port gets
		// nothing, on a new connection or on one kept from before.
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) {
				if err := checkConnPeer(info.Conn, name); err != nil {
					wrongPeer = err
					info.Conn.Close()
				}
			},
		}))
	}
	resp, err := c.http.Do(req)
	if wrongPeer != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return nil, wrongPeer
	}
	if err != nil {
		var ce connectTimeoutError
		if errors.As(context.Cause(req.Context()), &ce) {
			return nil, fmt.Errorf("%s: %w", req.URL.Host, ce)
		}
		return nil, err
	}
	if c.scheme == "https" && name != "" {
		if err := CheckPeer(resp, name); err != nil {
			resp.Body.Close()
			return nil, err
		}
	}
	return resp, nil
}

// ConnectWithin returns ctx for an admin request that fails unless its
// connection is set up (TCP, and TLS over HTTPS) within d, or an idle one
// taken, however long it may then wait for its answer. A request
// whose answer takes long by design (a relay's batched probes) is given
// its whole bound; a relay that has vanished, or whose admin port is
// filtered, would otherwise hold it all that time, SYNs unanswered. The
// returned cancel releases the timer.
func ConnectWithin(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(d, func() { cancel(connectTimeoutError{d}) })
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { timer.Stop() }})
	return ctx, func() {
		timer.Stop()
		cancel(context.Canceled)
	}
}

// connectTimeoutError ends a request that had no connection within its
// ConnectWithin bound.
type connectTimeoutError struct{ d time.Duration }

func (e connectTimeoutError) Error() string {
	return fmt.Sprintf("no connection within %v (the relay is down, or its admin port is filtered from here)", e.d)
}
func (connectTimeoutError) Timeout() bool   { return true } // a net.Error, as a dial's timeout is
func (connectTimeoutError) Temporary() bool { return false }

// CheckPeer says whether an HTTPS answer came from the relay called
// name (its verified certificate names it); for clients with a transport
// of their own (relayctl bench dials through the path it measures).
func CheckPeer(resp *http.Response, name string) error {
	if p, ok := linktls.AdminPeer(resp.TLS); !ok || p.Name != name {
		return fmt.Errorf("%s is relay %q, not %q: the registry's admin address is wrong (or claimed by another relay)", resp.Request.URL.Host, p.Name, name)
	}
	return nil
}

// checkConnPeer says whether c, an HTTPS connection to an admin API,
// reaches the relay called name.
func checkConnPeer(c net.Conn, name string) error {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return fmt.Errorf("admin connection to %s is not TLS", c.RemoteAddr())
	}
	cs := tc.ConnectionState()
	if p, ok := linktls.AdminPeer(&cs); !ok || p.Name != name {
		return fmt.Errorf("%s is relay %q, not %q: the registry's admin address is wrong (or claimed by another relay); nothing was sent", c.RemoteAddr(), p.Name, name)
	}
	return nil
}

// WithTimeout is c with another overall timeout per request, sharing c's
// connections.
func (c *Client) WithTimeout(timeout time.Duration) *Client {
	if c.err != nil {
		return c
	}
	hc := *c.http
	hc.Timeout = timeout
	return &Client{http: &hc, scheme: c.scheme, connectTimeout: c.connectTimeout}
}

// WithConnectTimeout is c, sharing its connections, whose Get fails
// unless its connection is set up within d (ConnectWithin).
func (c *Client) WithConnectTimeout(d time.Duration) *Client {
	cc := *c
	cc.connectTimeout = d
	return &cc
}

// Get GETs path (with its query) from the admin API at addr of the relay
// called name, with token when not empty, and returns the body of a 200
// answer (at most limitBytes), or an error that quotes the answer.
func (c *Client) Get(ctx context.Context, name, addr, path, token string, limitBytes int64) ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.connectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = ConnectWithin(ctx, c.connectTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL(addr, path), nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req, name)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limitBytes))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s%s: %s: %s", addr, path, resp.Status, trimBody(body))
	}
	return body, err
}

// trimBody is an error answer's body as one short line.
func trimBody(b []byte) string {
	const most = 200
	s := string(b)
	if len(s) > most {
		s = s[:most] + "…"
	}
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	return s
}
