package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
)

// noRoute refuses every destination, so a fuzzed request never dials (or
// resolves) anything.
type noRoute struct{}

func (noRoute) Route(context.Context, string) (*chain.Chain, error) {
	return nil, errors.New("no route in this test")
}

// FuzzHTTPFrontend feeds arbitrary bytes to the HTTP front end as one
// request: Go's request-line and header parsing (what http.Server runs),
// then our handler: Proxy-Authorization, CONNECT targets, absolute-form
// URLs. It must never panic (the handler's recover would hide a panic, so
// the panic counter must stay 0), and since nothing is routable every
// answer is an error status.
func FuzzHTTPFrontend(f *testing.F) {
	cfg := Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "", "127.0.0.1:0", ""
	cfg.Auth.Users = []User{{Name: "alice", Password: "s3cret"}}
	s, err := New(cfg, zap.NewNop())
	if err != nil {
		f.Fatal(err)
	}
	s.SetRouter(noRoute{})
	h := s.newHTTPFrontend().Handler
	const auth = "Proxy-Authorization: Basic YWxpY2U6czNjcmV0\r\n" // alice:s3cret
	for _, seed := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n" + auth + "\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n" + auth + "\r\n",
		"CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n" + auth + "\r\n",
		"GET http://example.com/x?y=1 HTTP/1.1\r\nHost: example.com\r\n" + auth + "Connection: close\r\n\r\n",
		"GET /relative HTTP/1.1\r\nHost: example.com\r\n" + auth + "\r\n",
		"GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + auth + "\r\n",
		"POST http://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + auth + "Content-Length: 3\r\n\r\nabc",
		"CONNECT example.com:443 HTTP/1.1\r\nProxy-Authorization: Basic !!!\r\n\r\n",
		"CONNECT example.com:443 HTTP/1.1\r\nProxy-Authorization: Bearer x\r\n\r\n",
		"GET http://example.com/ HTTP/1.0\r\n\r\n",
		"GET http://example.com/ws HTTP/1.1\r\nHost: example.com\r\n" + auth + "Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"GET http://example.com/ws HTTP/1.1\r\nHost: example.com\r\n" + auth + "Connection: Upgrade\r\nUpgrade: web\x01socket\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return // refused by the parser: http.Server answers 400 itself
		}
		req.RemoteAddr = "192.0.2.1:5555"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if n := testutil.ToFloat64(s.metrics.panics); n != 0 {
			t.Fatalf("the handler panicked (%v recovered) on %q", n, data)
		}
		if rec.Code < 400 {
			t.Fatalf("status %d with no route to anything, for %q", rec.Code, data)
		}
	})
}
