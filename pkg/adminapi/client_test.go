package adminapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/linktls"
)

// A relay's admin API answering with a redirect gets neither the token
// sent on nor a request made where it points (a planted registration's
// admin address redirecting to a metadata service, say).
func TestClientNoRedirects(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	liar := httptest.NewServer(http.RedirectHandler(target.URL+"/latest/meta-data/", http.StatusFound))
	defer liar.Close()
	req, _ := http.NewRequest(http.MethodGet, liar.URL+"/v1/info", nil)
	req.Header.Set("Authorization", "Bearer fleet-admin-token")
	resp, err := NewClient(5*time.Second, nil).Do(req, "")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits.Load() != 0 {
		t.Fatalf("status %d, redirect target hit %d times: want the 302 itself and no request", resp.StatusCode, hits.Load())
	}
}

func mustIdentity(t *testing.T, secret, name, role string) *linktls.Identity {
	t.Helper()
	id, err := linktls.New([]byte(secret), name, role)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Over TLS the admin token goes only to a relay of the fleet, and an
// answer counts only from the relay the request was for: a registered
// admin address that is another host (a stranger's server, a relay of
// another fleet) or another relay gets no token, or is not believed.
func TestClientTLS(t *testing.T) {
	const secret = "a-fleet-secret-of-32-bytes-long!"
	var tokens atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			tokens.Add(1)
		}
		_, _ = w.Write([]byte("ok"))
	})
	relayAdmin := func(id *linktls.Identity) *httptest.Server {
		s := httptest.NewUnstartedServer(handler)
		s.TLS = id.AdminServerConfig()
		s.StartTLS()
		return s
	}
	r1 := relayAdmin(mustIdentity(t, secret, "r1", linktls.RoleRelay))
	defer r1.Close()
	other := relayAdmin(mustIdentity(t, "another-fleet-secret-32-bytes!!!", "r1", linktls.RoleRelay))
	defer other.Close()
	stranger := httptest.NewTLSServer(handler) // its own self-signed certificate
	defer stranger.Close()

	c := NewClient(5*time.Second, mustIdentity(t, secret, "relayctl", linktls.RoleClient).AdminClientConfig())
	ctx := context.Background()
	addr := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "https://") }

	if body, err := c.Get(ctx, "r1", addr(r1), "/v1/info", "token-token-token", 64); err != nil || string(body) != "ok" {
		t.Fatalf("r1: %q, %v", body, err)
	}
	if tokens.Load() != 1 {
		t.Fatalf("r1 saw %d tokens, want 1", tokens.Load())
	}
	if _, err := c.Get(ctx, "r2", addr(r1), "/v1/info", "", 64); err == nil || !strings.Contains(err.Error(), `is relay "r1", not "r2"`) {
		t.Errorf("r1's admin address registered as r2's: %v, want refused", err)
	}
	for name, s := range map[string]*httptest.Server{"another fleet": other, "a stranger": stranger} {
		if _, err := c.Get(ctx, "r1", addr(s), "/v1/info", "token-token-token", 64); err == nil {
			t.Errorf("%s answered as r1", name)
		}
	}
	if tokens.Load() != 1 {
		t.Fatalf("the token reached %d servers that are not r1", tokens.Load()-1)
	}
	if _, err := FailingClient(context.Canceled).Get(ctx, "r1", addr(r1), "/healthz", "", 64); err != context.Canceled {
		t.Errorf("a failing client: %v", err)
	}
}

// ConnectWithin bounds a request's connection, not its answer: a relay
// that answers slowly by design is waited for, one whose admin port never
// completes a connection fails at the bound, not at the client's timeout.
func TestConnectWithin(t *testing.T) {
	const secret = "a-fleet-secret-of-32-bytes-long!"
	slow := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(600 * time.Millisecond)
		_, _ = w.Write([]byte("ok"))
	}))
	slow.TLS = mustIdentity(t, secret, "r1", linktls.RoleRelay).AdminServerConfig()
	slow.StartTLS()
	defer slow.Close()
	// TCP completes (the kernel's backlog), TLS never does.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()

	c := NewClient(30*time.Second, mustIdentity(t, secret, "relayctl", linktls.RoleClient).AdminClientConfig())
	for how, get := range map[string]func(addr string) ([]byte, error){
		"ConnectWithin": func(addr string) ([]byte, error) {
			ctx, cancel := ConnectWithin(context.Background(), 200*time.Millisecond)
			defer cancel()
			return c.Get(ctx, "r1", addr, "/v1/probe", "", 64)
		},
		"WithConnectTimeout": func(addr string) ([]byte, error) {
			return c.WithConnectTimeout(200*time.Millisecond).WithTimeout(20*time.Second).Get(context.Background(), "r1", addr, "/v1/probe", "", 64)
		},
	} {
		if body, err := get(strings.TrimPrefix(slow.URL, "https://")); err != nil || string(body) != "ok" {
			t.Errorf("%s: an answer slower than the connection's bound: %q, %v", how, body, err)
		}
		_, err = get(mute.Addr().String())
		var ne net.Error
		if err == nil || !strings.Contains(err.Error(), "no connection within 200ms") || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("%s: a mute admin port: %v, want no connection within 200ms, a timeout", how, err)
		}
	}
}
