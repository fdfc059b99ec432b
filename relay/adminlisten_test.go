package relay

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/linktls"
)

const testSecret = "a-fleet-secret-of-32-bytes-long!"

// startAdmin runs a relay with links over TLS and its admin API on
// loopback.
func startAdmin(t *testing.T) *Server {
	t.Helper()
	return startAdminWith(t, func(cfg *Config) { cfg.CapacityMbit = 250 })
}

// startAdminWith is startAdmin with its config changed by set.
func startAdminWith(t *testing.T, set func(*Config)) *Server {
	t.Helper()
	cfg := Defaults()
	cfg.Name = "r1"
	cfg.SOCKS, cfg.HTTP, cfg.Admin, cfg.Relay = "", "", "127.0.0.1:0", "127.0.0.1:0"
	cfg.FleetSecret = testSecret
	cfg.AdminToken = "admin-token-0123456789"
	set(&cfg)
	return startServer(t, cfg)
}

// One admin port answers HTTPS (verified with the fleet CA, naming the
// relay) and, from loopback, plain HTTP.
func TestAdminServesTLSAndLocalPlain(t *testing.T) {
	s := startAdmin(t)
	id, err := linktls.New([]byte(testSecret), "relayctl", linktls.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	c := adminapi.NewClient(5*time.Second, id.AdminClientConfig())
	body, err := c.Get(context.Background(), "r1", s.AdminAddr(), "/v1/info", s.cfg.AdminToken, 1<<20)
	if err != nil || !strings.Contains(string(body), `"name":"r1"`) {
		t.Fatalf("HTTPS /v1/info: %v\n%s", err, body)
	}
	// The declared capacity, in bits/s, for planners (pkg/survey).
	if !strings.Contains(string(body), `"capacity_bps":250000000`) {
		t.Errorf("/v1/info without the declared capacity:\n%s", body)
	}
	if _, err := c.Get(context.Background(), "r2", s.AdminAddr(), "/healthz", "", 64); err == nil {
		t.Error("r1's admin API taken for r2's")
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.AdminAddr()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.cfg.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("plain HTTP from loopback: %s", resp.Status)
	}
	// A link client (ALPN relaymesh/1) gets no handshake on the admin port.
	raw, err := net.Dial("tcp", s.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := id.Client(context.Background(), raw, "r1"); err == nil {
		t.Error("a relay link handshake succeeded on the admin port")
	}
}

// Plain HTTP from another host gets /healthz only; the rest is refused
// with a 403 that says to use HTTPS, and counted.
func TestAdminPlainFromAfar(t *testing.T) {
	s := startAdmin(t)
	h := s.adminSrv.Handler
	for _, tc := range []struct {
		remote, path string
		tls          bool
		want         int
	}{
		{"192.0.2.7:40000", "/healthz", false, http.StatusOK},
		{"192.0.2.7:40000", "/v1/info", false, http.StatusForbidden},
		{"192.0.2.7:40000", "/metrics", false, http.StatusForbidden},
		{"[2001:db8::7]:40000", "/v1/measurements", false, http.StatusForbidden},
		{"192.0.2.7:40000", "/v1/info", true, http.StatusOK},
		{"127.0.0.1:40000", "/v1/info", false, http.StatusOK},
		{"[::ffff:127.0.0.1]:40000", "/v1/info", false, http.StatusOK},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.RemoteAddr = tc.remote
		req.Header.Set("Authorization", "Bearer "+s.cfg.AdminToken)
		req = req.WithContext(context.WithValue(req.Context(), adminConnKey{}, &sniffConn{isTLS: tc.tls}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("%s %s (tls %v): %d, want %d", tc.remote, tc.path, tc.tls, w.Code, tc.want)
		}
		if w.Code == http.StatusForbidden && !strings.Contains(w.Body.String(), "https://") {
			b, _ := io.ReadAll(w.Result().Body)
			t.Errorf("the refusal does not say what to do: %s", b)
		}
	}
}
