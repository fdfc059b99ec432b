package relay

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/httpconnect"
)

// maxRequestHeaderBytes bounds a client's request header.
const maxRequestHeaderBytes = 64 << 10

func (s *Server) newHTTPFrontend() *http.Server {
	h := &httpFrontend{s: s}
	h.forward = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Absolute-form in, absolute URL out; hop-by-hop headers
			// (Connection, Proxy-Connection, Proxy-Authorization, ...) are
			// already stripped by ReverseProxy. No X-Forwarded-For: a relay
			// does not tell the destination who its client is.
			pr.Out.URL = pr.In.URL
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				up, _, err := s.dial(ctx, s.log.With(zap.String("frontend", "http")), addr, nil)
				return up, err
			},
			// Idle upstream conns sit outside max_conns: few, and short-lived.
			MaxIdleConns:          32,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       15 * time.Second,
			ResponseHeaderTimeout: s.cfg.Limits.IdleTimeout,
		},
		FlushInterval: -1, // stream: a proxy must not hold bytes back
		ErrorHandler:  h.forwardError,
		ErrorLog:      zap.NewStdLog(s.log.Named("http.forward")),
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.Limits.HandshakeTimeout,
		IdleTimeout:       s.cfg.Limits.HandshakeTimeout * 6,
		MaxHeaderBytes:    maxRequestHeaderBytes,
		// A planning router reads the client's RTT and window off its conn.
		ConnContext: withClientConn,
		ErrorLog:    zap.NewStdLog(s.log.Named("http.server")),
		ConnState: func(c net.Conn, st http.ConnState) {
			switch st {
			case http.StateClosed:
				s.release(c)
			case http.StateHijacked:
				// The server forgets a hijacked conn: it never reaches
				// StateClosed. ServeHTTP releases its slot when the
				// handler that hijacked it (a CONNECT tunnel, or a
				// protocol upgrade such as a websocket) returns.
				h.hijacked.Store(c, struct{}{})
			}
		},
	}
}

type httpFrontend struct {
	s       *Server
	forward *httputil.ReverseProxy
	// hijacked holds the conns taken over by a handler (net.Conn -> struct{}).
	hijacked sync.Map
}

func (h *httpFrontend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	defer func() {
		if c := clientConn(r.Context()); c != nil {
			if _, ok := h.hijacked.LoadAndDelete(c); ok {
				s.release(c)
			}
		}
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.metrics.panics.Inc()
			s.log.Error("panic in http handler", zap.Any("panic", p), zap.Stack("stack"))
		}
	}()
	if s.auth.enabled() && !s.auth.checkProxyAuthorization(r.Header.Get("Proxy-Authorization")) {
		s.authDenied(s.log.With(zap.String("frontend", "http"), zap.String("src", r.RemoteAddr)), "http", "missing or wrong Proxy-Authorization")
		w.Header().Set("Proxy-Authenticate", `Basic realm="relaymesh"`)
		http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		h.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "this is a proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port", http.StatusBadRequest)
		return
	}
	if r.URL.Scheme != "http" {
		http.Error(w, "only http:// URLs are forwarded; use CONNECT for "+r.URL.Scheme, http.StatusBadRequest)
		return
	}
	h.forward.ServeHTTP(w, r)
}

// connect serves a CONNECT tunnel: dial the whole path first, answer 200 only
// then, hijack, and hand both raw TCP conns to the tunnel.
func (h *httpFrontend) connect(w http.ResponseWriter, r *http.Request) {
	s := h.s
	dst := r.Host
	log := s.log.With(zap.Uint64("conn", s.nextID.Add(1)), zap.String("frontend", "http"), zap.String("src", r.RemoteAddr), zap.String("dst", dst))
	if _, port, err := net.SplitHostPort(dst); err != nil || port == "" {
		http.Error(w, fmt.Sprintf("CONNECT target %q is not host:port", dst), http.StatusBadRequest)
		return
	}
	up, _, err := s.dial(r.Context(), log, dst, nil)
	if err != nil {
		kind := chain.Classify(err)
		s.metrics.tunnelsOpened.WithLabelValues("http", kind.Label()).Inc()
		w.Header().Set(httpconnect.ErrorHeader, kind.Label())
		http.Error(w, publicError(err), statusOfKind(kind))
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		log.Info("hijack failed", zap.Error(err))
		return
	}
	// ServeHTTP releases c's slot when this returns.
	// openTunnel clears the server's header deadline, still set on the
	// hijacked conn.
	s.openTunnel(log, "http", c, []byte("HTTP/1.1 200 Connection established\r\n\r\n"), brw.Reader, up)
}

func (h *httpFrontend) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	kind := chain.Classify(err)
	if ctxErr := r.Context().Err(); ctxErr != nil {
		return // the client went away; nobody to answer
	}
	w.Header().Set(httpconnect.ErrorHeader, kind.Label())
	http.Error(w, publicError(err), statusOfKind(kind))
}

// publicError is what a client is told of a failure: its kind and which hop
// failed, never the addresses of the hops behind this relay (the log has
// them), as the SOCKS5 front end tells only a reply code.
func publicError(err error) string {
	msg := "relaymesh: " + chain.Classify(err).Label()
	var he *chain.HopError
	if errors.As(err, &he) {
		msg += fmt.Sprintf(" at hop %d", he.Hop)
	}
	return msg
}

// statusOfKind maps a failure to the HTTP status a proxy answers with.
func statusOfKind(k chain.Kind) int {
	switch k {
	case chain.KindDenied:
		return http.StatusForbidden
	case chain.KindTimeout:
		return http.StatusGatewayTimeout
	default:
		return http.StatusBadGateway
	}
}

// parseBasic decodes a "Basic base64(user:pass)" header value.
func parseBasic(v string) (user, pass string, ok bool) {
	scheme, enc, found := strings.Cut(v, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}
