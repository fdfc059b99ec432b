package relay

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// A local handler (relayctl connect's PAC file) serves origin-form
// requests without proxy credentials; proxy requests still need them.
func TestLocalHandlerBeforeAuth(t *testing.T) {
	cfg := Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "", "127.0.0.1:0", ""
	cfg.Auth.Users = []User{{Name: "alice", Password: "s3cret"}}
	s, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	s.SetRouter(noRoute{})
	serve := func(method, target string) int {
		req := httptest.NewRequest(method, target, nil)
		req.RemoteAddr = "192.0.2.1:5555"
		rec := httptest.NewRecorder()
		s.newHTTPFrontend().Handler.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := serve(http.MethodGet, "/proxy.pac"); code != http.StatusProxyAuthRequired {
		t.Fatalf("no local handler: GET /proxy.pac without credentials: %d, want 407", code)
	}
	s.SetLocalHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/proxy.pac") {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusTeapot)
	}))
	if code := serve(http.MethodGet, "/proxy.pac"); code != http.StatusTeapot {
		t.Errorf("GET /proxy.pac without credentials: %d, want the local handler's 418", code)
	}
	for _, target := range []string{"http://example.com/proxy.pac", "example.com:443"} {
		method := http.MethodGet
		if !strings.HasPrefix(target, "http") {
			method = http.MethodConnect
		}
		if code := serve(method, target); code != http.StatusProxyAuthRequired {
			t.Errorf("%s %s without credentials: %d, want 407", method, target, code)
		}
	}
}
