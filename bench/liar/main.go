// Command liar plays a compromised relay for bench/run-liar-bench.sh: the
// relay's own relayd carries its traffic, but what planners read of it is
// a lie. It serves the relay's admin API at the address the registry
// lists, with the relay's own kind of certificate (the lab's fleet secret
// makes one for any name, as a compromised relay holds its own), forwards
// every request to the real relayd's admin API (on loopback in the same
// namespace, which relayd answers in plain HTTP), and multiplies every RTT
// of an answer that has this relay as an end by the lie factor:
//
//   - /v1/measurements: each pair from or to this relay (rtt_ms, min_ms,
//     p90_ms, jitter_ms), served as just measured (age_s 0), so that it
//     is the newest word on the pair and wins over the other end's;
//   - /v1/probe: every summary of an answer from this relay (min_ms,
//     median_ms, p90_ms, jitter_ms).
//
// Everything else (info, windows, the traffic source) passes unchanged.
// The factor is read from a file at each request, so that one lab run can
// plan at several factors without restarting anything; 1 (or no file) is
// the truth.
//
// The lab's relays do not publish coordinates (probe mode mesh), so none is
// rewritten; UDP probe asks are not answered (planners fall back to HTTPS).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relaymesh/relaymesh/pkg/envvar"
	"github.com/relaymesh/relaymesh/pkg/linktls"
)

func main() {
	listen := flag.String("listen", "", "where to serve the relay's admin API (the address the registry lists), host:port")
	upstream := flag.String("upstream", "127.0.0.1:9091", "the real relayd's admin API, on loopback (answered in plain HTTP)")
	name := flag.String("name", "", "the relay this stands for: its certificate's name, and the end whose RTTs are rewritten")
	factorFile := flag.String("factor-file", "", "file holding the lie factor (0 < f; 1 is the truth), read at each request; absent: 1")
	secretFile := flag.String("secret-file", os.Getenv(envvar.FleetSecretFile), "the fleet secret (default $"+envvar.FleetSecretFile+")")
	pidFile := flag.String("pid-file", "", "write this process's id here (the benchmark stops it by that id)")
	lifetime := flag.Duration("lifetime", time.Hour, "exit after this long, so that a benchmark that died leaves nothing behind")
	transport := flag.String("transport", cmpOr(os.Getenv(envvar.Transport), "tls"), "tls (HTTPS with the relay's certificate) or plain (default $"+envvar.Transport+", else tls)")
	flag.Parse()
	if *listen == "" || *name == "" {
		log.Fatal("liar: --listen and --name are required")
	}
	if *pidFile != "" {
		if err := os.WriteFile(*pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	l := &liar{name: *name, factorFile: *factorFile}
	target := &url.URL{Scheme: "http", Host: *upstream}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		ModifyResponse: l.modify,
		// The traffic source streams: pass it on as it comes.
		FlushInterval: -1,
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	switch *transport {
	case "plain":
	case "tls":
		secret, err := os.ReadFile(*secretFile)
		if err != nil {
			log.Fatalf("liar: fleet secret: %v", err)
		}
		id, err := linktls.New(bytes.TrimSpace(secret), *name, linktls.RoleRelay)
		if err != nil {
			log.Fatal(err)
		}
		ln = tls.NewListener(ln, id.AdminServerConfig())
	default:
		log.Fatalf("liar: --transport %q: want tls or plain", *transport)
	}
	// Peers' mesh probers time TCP handshakes to the admin port and hang
	// up: each would log a TLS handshake error.
	quiet := log.New(dropLines{"TLS handshake error"}, "", log.LstdFlags)
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second, ErrorLog: quiet}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *lifetime)
	defer cancel()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("liar: %s's admin API on %s (%s), relayd's on %s, factor from %q", *name, *listen, *transport, *upstream, *factorFile)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// dropLines writes to stderr the log lines that do not contain skip.
type dropLines struct{ skip string }

func (d dropLines) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(d.skip)) {
		return len(p), nil
	}
	return os.Stderr.Write(p)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type liar struct {
	name       string
	factorFile string
}

// factor is the lie factor now: the file's number, 1 without a file or
// with one that does not hold a positive number (the truth is the safe
// default for a run that forgot to say).
func (l *liar) factor() float64 {
	if l.factorFile == "" {
		return 1
	}
	data, err := os.ReadFile(l.factorFile)
	if err != nil {
		return 1
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
	if err != nil || !(f > 0) {
		return 1
	}
	return f
}

// modify rewrites the answers that carry this relay's RTTs.
func (l *liar) modify(resp *http.Response) error {
	f := l.factor()
	if f == 1 || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil
	}
	var rewrite func([]byte, string, float64) ([]byte, error)
	switch resp.Request.URL.Path {
	case "/v1/measurements":
		rewrite = rewriteMeasurements
	case "/v1/probe":
		rewrite = rewriteProbe
	default:
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err != nil {
		return err
	}
	out, err := rewrite(body, l.name, f)
	if err != nil {
		return fmt.Errorf("liar: %s: %w", resp.Request.URL.Path, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}
