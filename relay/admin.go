package relay

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/buildinfo"
	"github.com/relaymesh/relaymesh/pkg/traffic"
)

// newAdmin serves /healthz (always open: load balancers and Docker probe it),
// and behind admin_token when one is set: /metrics, /v1/info (identity,
// chain, socket limits), /v1/measurements (RTTs to peer relays) and
// /v1/probe (RTT to a destination, on demand) and /v1/traffic/ (the
// benchmark source and sink).
func (s *Server) newAdmin() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", s.adminAuth(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	mux.Handle("GET /v1/info", s.adminAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"name":    s.cfg.Name,
			"region":  s.cfg.Region,
			"version": buildinfo.Version(),
			"socks":   s.SOCKSAddr(),
			"http":    s.HTTPAddr(),
			"relay":   s.RelayAddr(),
			"next":    s.chain.Load().Names(),
			"active":  s.active(),
			"fleet":   s.cfg.Fleet,
			"limits":  ReadLimits(),
		})
	})))
	mux.Handle("GET /v1/measurements", s.adminAuth(http.HandlerFunc(s.serveMeasurements)))
	mux.Handle("GET /v1/probe", s.adminAuth(http.HandlerFunc(s.serveProbe)))
	// The traffic source and sink `relayctl bench` measures against
	// (GET /v1/traffic/bytes/N, POST /v1/traffic/upload). Transfers may
	// outlive the admin server's read and write timeouts.
	mux.Handle("/v1/traffic/", s.adminAuth(http.StripPrefix("/v1/traffic", noDeadlines(traffic.Handler()))))
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          zap.NewStdLog(s.log.Named("admin")),
	}
}

// noDeadlines lifts the server's read and write deadlines for h: a
// benchmark transfer takes as long as the path makes it take.
func noDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
}

func (s *Server) adminAuth(next http.Handler) http.Handler {
	if s.cfg.AdminToken == "" {
		return next
	}
	want := []byte("Bearer " + s.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(strings.TrimSpace(r.Header.Get("Authorization")))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="relaymesh-admin"`)
			http.Error(w, "admin token required: Authorization: Bearer <admin_token>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
