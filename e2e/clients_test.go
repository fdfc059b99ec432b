package e2e

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// rawRecorder is a forward dialer for x/net/proxy that keeps the raw TCP conn,
// so tests can half-close it (the *socks.Conn x/net returns hides CloseWrite).
type rawRecorder struct{ conn *net.TCPConn }

func (r *rawRecorder) Dial(network, addr string) (net.Conn, error) {
	return r.DialContext(context.Background(), network, addr)
}

// DialContext makes rawRecorder a proxy.ContextDialer. Without it x/net
// dials in a goroutine that closes the new conn if the context is done by
// the time that goroutine looks, and xnetDial cancels its context as it
// returns: under load (10,000 dials) a conn was closed under a test, which
// then read "use of closed network connection".
func (r *rawRecorder) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	r.conn = c.(*net.TCPConn)
	return c, nil
}

// xnetDial connects to dst through the SOCKS5 proxy at proxyAddr using
// golang.org/x/net/proxy, an independent client implementation.
func xnetDial(t testing.TB, proxyAddr, dst string, auth *proxy.Auth) (net.Conn, *net.TCPConn, error) {
	t.Helper()
	rec := &rawRecorder{}
	d, err := proxy.SOCKS5("tcp", proxyAddr, auth, rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", dst)
	return c, rec.conn, err
}
