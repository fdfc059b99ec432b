// Package traffictest is a client of the traffic service for tests: kept
// out of package traffic so that relayd, which serves the traffic source,
// does not carry a SOCKS5 client.
package traffictest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/proxy"
)

// GetViaSOCKS5 downloads url through the SOCKS5 proxy at socks (no
// credentials; names resolved by the proxy) on a fresh connection, within
// timeout, and returns how many body bytes arrived and their SHA-256 (hex).
// A status other than 200 is an error; so is a body cut short, which then
// comes with the bytes and hash of what did arrive.
func GetViaSOCKS5(ctx context.Context, socks, url string, timeout time.Duration) (int64, string, error) {
	d, err := proxy.SOCKS5("tcp", socks, nil, proxy.Direct)
	if err != nil {
		return 0, "", err
	}
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.(proxy.ContextDialer).DialContext(ctx, network, addr)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, "", errors.New(resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	return n, hex.EncodeToString(h.Sum(nil)), err
}
