package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"strconv"
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
		// Never a protocol upgrade: ServeHTTP sends those to upgrade
		// (pkg/tunnel); the reverse proxy's own upgrade copier has no
		// idle or drain bound, and it refuses (502) a 101 to a request
		// that asked for no upgrade.
		ErrorHandler: h.forwardError,
		ErrorLog:     zap.NewStdLog(s.log.Named("http.forward")),
	}
	return &http.Server{
		Handler: h,
		// A stranger's first request header within this; a 407 closes
		// the connection (ServeHTTP), so only an authenticated client
		// is kept alive between requests.
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

// authenticateHTTP decides a request's Proxy-Authorization from src.
// A request without one is asking to be asked (a browser's first
// request), not guessing: it is refused uncounted, unless src is blocked.
func (s *Server) authenticateHTTP(log *zap.Logger, src netip.Addr, header string) authVerdict {
	if header == "" {
		if s.guessBlocked(log, src) {
			return authBlocked
		}
		s.authDenied(log, "http", "missing Proxy-Authorization")
		return authWrong
	}
	check := func() bool { return s.auth.checkProxyAuthorization(header) }
	return s.authenticate(log, "http", "wrong Proxy-Authorization", src, check)
}

func (h *httpFrontend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	defer func() {
		if c := clientConn(r.Context()); c != nil {
			if _, ok := h.hijacked.LoadAndDelete(c); ok {
				s.handlerDone(c)
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
	// Every answer is written within the stall bound: a client that
	// reads nothing cannot hold the handler (and its slot).
	w = h.boundWrites(w)
	if s.local != nil && r.Method != http.MethodConnect && !r.URL.IsAbs() {
		s.local.ServeHTTP(w, r)
		return
	}
	log := s.log.WithLazy(zap.String("frontend", "http"), zap.String("src", r.RemoteAddr))
	src := netip.Addr{}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		src = ap.Addr()
	}
	if s.auth.enabled() {
		switch s.authenticateHTTP(log, src, r.Header.Get("Proxy-Authorization")) {
		case authBlocked:
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.Limits.AuthBlock.Seconds())))
			http.Error(w, "relaymesh: too many failed authentications from this address", http.StatusTooManyRequests)
			return
		case authWrong, authBlocks:
			w.Header().Set("Proxy-Authenticate", `Basic realm="relaymesh"`)
			// Not kept alive: a stranger could keep its connection by
			// asking again, unauthenticated, forever.
			w.Header().Set("Connection", "close")
			http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
			return
		}
	}
	if c := clientConn(r.Context()); c != nil && !s.takeSlot(log, c) {
		w.Header().Set("Connection", "close")
		http.Error(w, "relaymesh: too many connections", http.StatusServiceUnavailable)
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
	if proto := upgradeType(r.Header); proto != "" {
		h.upgrade(w, r, proto)
		return
	}
	h.forward.ServeHTTP(w, r)
}

// connect serves a CONNECT tunnel: dial the whole path first, answer 200 only
// then, hijack, and hand both raw TCP conns to the tunnel.
func (h *httpFrontend) connect(w http.ResponseWriter, r *http.Request) {
	s := h.s
	dst := r.Host
	log := s.log.WithLazy(zap.Uint64("conn", s.nextID.Add(1)), zap.String("frontend", "http"), zap.String("src", r.RemoteAddr), zap.String("dst", dst))
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
	c, brw, err := http.NewResponseController(w).Hijack()
	if errors.Is(err, http.ErrNotSupported) {
		up.Close()
		http.Error(w, "CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
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

// upgradeType is the protocol a request (or a 101 answer) upgrades to:
// its Upgrade header when Connection lists "upgrade", else "".
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for token := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(token), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// hopHeaders are the hop-by-hop headers (RFC 9110 section 7.6.1), not
// passed on in either direction, with those Connection names.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// upgrade serves a protocol upgrade (a websocket) on a destination
// connection of its own. A 101 answer makes the two a tunnel, through
// pkg/tunnel with the idle and drain bounds of a CONNECT tunnel: a
// destination that stays silent after the client left cannot keep the
// client's slot. Any other answer is passed on, and the destination
// connection closed.
func (h *httpFrontend) upgrade(w http.ResponseWriter, r *http.Request, proto string) {
	s := h.s
	dst := r.URL.Host
	if r.URL.Port() == "" {
		dst = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	log := s.log.WithLazy(zap.Uint64("conn", s.nextID.Add(1)), zap.String("frontend", "http"), zap.String("src", r.RemoteAddr),
		zap.String("dst", dst), zap.String("upgrade", proto))
	if !isPrintableASCII(proto) {
		http.Error(w, "the Upgrade header is not printable ASCII", http.StatusBadRequest)
		return
	}
	up, _, err := s.dial(r.Context(), log, dst, nil)
	if err != nil {
		s.metrics.tunnelsOpened.WithLabelValues("http", chain.Classify(err).Label()).Inc()
		h.forwardError(w, r, err)
		return
	}
	resp, upr, err := h.askUpgrade(up, r, proto)
	if err != nil {
		up.Close()
		log.Info("upgrade request failed", zap.Error(err))
		h.forwardError(w, r, err)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer up.Close()
		passOn(w, resp)
		return
	}
	if got := upgradeType(resp.Header); !strings.EqualFold(got, proto) {
		up.Close()
		log.Info("destination switched to another protocol", zap.String("got", got))
		h.forwardError(w, r, fmt.Errorf("destination switched to %q, asked %q", got, proto))
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		log.Info("hijack failed", zap.Error(err))
		return
	}
	// The 101 and whatever the destination sent behind it, read ahead.
	removeHopHeaders(resp.Header)
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", proto)
	resp.Body = nil // the header only
	var reply bytes.Buffer
	_ = resp.Write(&reply)
	ahead, _ := upr.Peek(upr.Buffered())
	reply.Write(ahead)
	// ServeHTTP releases c's slot when this returns.
	s.openTunnel(log, "http", c, reply.Bytes(), brw.Reader, up)
}

// askUpgrade sends r, asking to upgrade to proto, to the destination on
// up and reads its answer; the reader may hold bytes read ahead. The
// answer is waited for as a forwarded request's is (the idle timeout).
func (h *httpFrontend) askUpgrade(up net.Conn, r *http.Request, proto string) (*http.Response, *bufio.Reader, error) {
	out := r.Clone(r.Context())
	removeHopHeaders(out.Header)
	out.Header.Set("Connection", "Upgrade")
	out.Header.Set("Upgrade", proto)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // none, rather than Go's
	}
	if wait := h.s.cfg.Limits.IdleTimeout; wait > 0 {
		_ = up.SetDeadline(time.Now().Add(wait))
	}
	if err := out.Write(up); err != nil {
		return nil, nil, fmt.Errorf("writing the upgrade request: %w", err)
	}
	upr := bufio.NewReader(up)
	resp, err := http.ReadResponse(upr, out)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer to the upgrade: %w", err)
	}
	_ = up.SetDeadline(time.Time{})
	return resp, upr, nil
}

// passOn writes a destination's answer (not an upgrade) to the client.
func passOn(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func isPrintableASCII(v string) bool {
	for i := range len(v) {
		if v[i] < ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// stallBound is how long a write toward an HTTP client may stall before
// the client counts as gone: the tunnels' drain timeout (the client has
// sent its request; the answer drains toward it), or their idle timeout
// when that is shorter or the only one set; 0 when both are off.
func (s *Server) stallBound() time.Duration {
	l := s.cfg.Limits
	if l.DrainTimeout > 0 && (l.IdleTimeout == 0 || l.DrainTimeout < l.IdleTimeout) {
		return l.DrainTimeout
	}
	return l.IdleTimeout
}

// boundWrites sets the client conn's write deadline one stall bound
// ahead, and moves it on before every write and flush of the answer: a
// download that keeps moving is never cut, one whose client stopped
// reading fails within the bound, and the handler (a forwarded answer:
// the reverse proxy aborts) returns. A deadline outlives the answer (the
// server's last flush comes after the handler); the next request's
// handler sets a new one. A hijacking handler clears it (openTunnel).
func (h *httpFrontend) boundWrites(w http.ResponseWriter) http.ResponseWriter {
	bound := h.s.stallBound()
	if bound <= 0 {
		return w
	}
	bw := &boundedWriter{ResponseWriter: w, rc: http.NewResponseController(w), bound: bound}
	bw.extend()
	return bw
}

type boundedWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	bound time.Duration
}

func (b *boundedWriter) extend() { _ = b.rc.SetWriteDeadline(time.Now().Add(b.bound)) }

func (b *boundedWriter) WriteHeader(code int) {
	b.extend()
	b.ResponseWriter.WriteHeader(code)
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	b.extend()
	return b.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush calls.
func (b *boundedWriter) FlushError() error {
	b.extend()
	return b.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer (Hijack,
// deadlines).
func (b *boundedWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }
