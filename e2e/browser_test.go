package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// siteName resolves only in the far namespace's /etc/hosts: a client in
// the near one reaches it only by handing the name to a proxy.
const siteName = "site.example"

// TestBrowserThroughConnectPAC: headless Chromium, given only the URL of
// the PAC file relayctl connect serves, loads a page from a site it can
// reach only through connect's relay; curl does the same with the
// variables relayctl env prints. The site and the relay run in a network
// namespace with only loopback ("far"), Chromium, curl and connect in
// another ("near"); the one path between them is the test's forwarder to
// the relay's listener and admin port (the internet between a user and
// a relay). The site's name resolves only in far: the page arriving shows
// the browser sent the name through SOCKS5 to the relay.
func TestBrowserThroughConnectPAC(t *testing.T) {
	chromium := requireChromium(t)
	curl := requireCmd(t, "curl")
	far, near := loopbackOnlyNetns(t), loopbackOnlyNetns(t)
	etcHosts(t, far, "127.0.0.1 "+siteName+"\n")
	token := randomToken(t)
	inNetns(t, far, func() { startSite(t, "127.0.0.1:80", token) })
	secret := fleetSecretFile(t)
	r := startRelaydWrapped(t, []string{"ip", "netns", "exec", far}, "--name", "r1", "--allow-private",
		"--relay-listen", "127.0.0.1:7000", "--admin", "127.0.0.1:7001", "--fleet-secret-file", secret)
	for _, addr := range []string{"127.0.0.1:7000", "127.0.0.1:7001"} {
		forwardBetween(t, near, far, addr)
	}
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFile(t, fleet, "relays:\n  - {name: r1, region: far, admin: 127.0.0.1:7001, relay: 127.0.0.1:7000}\n")

	inNear := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", near}, args...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stopConnect := startConnect(t, inNear(ctx, relayctlBin, "connect", "--fleet", fleet, "--fleet-secret-file", secret,
		"--dst", siteName+":80"), "via r1")
	defer stopConnect()

	// Nothing in near reaches the site but through the proxy.
	if out, err := inNear(ctx, curl, "-sS", "--noproxy", "*", "--max-time", "5", "http://"+siteName+"/").CombinedOutput(); err == nil {
		t.Fatalf("curl reached the site without the proxy: %s", out)
	}

	t.Run("served PAC", func(t *testing.T) {
		out, err := inNear(ctx, curl, "-sS", "-D", "/dev/stderr", "http://127.0.0.1:8080/proxy.pac").Output()
		if err != nil {
			t.Fatalf("curl the PAC: %v", err)
		}
		want, err := exec.Command(relayctlBin, "pac", "--proxy", "127.0.0.1:1080", "--http-proxy", "127.0.0.1:8080").Output()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("connect serves:\n%s\nrelayctl pac writes:\n%s", out, want)
		}
		if bytes.Contains(out, []byte("SOCKS ")) || !bytes.Contains(out, []byte(`"SOCKS5 127.0.0.1:1080; PROXY 127.0.0.1:8080"`)) {
			t.Fatalf("served PAC:\n%s", out)
		}
		head, err := inNear(ctx, curl, "-sS", "-I", "http://127.0.0.1:8080/proxy.pac").Output()
		if err != nil || !strings.Contains(strings.ToLower(string(head)), "content-type: application/x-ns-proxy-autoconfig") {
			t.Fatalf("HEAD the PAC: %v\n%s", err, head)
		}
	})

	// Chromium loads the page through the served PAC file; given the same
	// file as a file:// URL it does not (docs/clients.md says so).
	chromiumGet := func(t *testing.T, pacURL string) (dom, stderr string, err error) {
		cctx, ccancel := context.WithTimeout(ctx, 90*time.Second)
		defer ccancel()
		cmd := inNear(cctx, chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
			"--user-data-dir="+t.TempDir(), "--proxy-pac-url="+pacURL, "--dump-dom", "http://"+siteName+"/")
		var errBuf bytes.Buffer
		cmd.Stderr = &errBuf
		out, err := cmd.Output()
		return string(out), errBuf.String(), err
	}
	t.Run("chromium", func(t *testing.T) {
		dom, stderr, err := chromiumGet(t, "http://127.0.0.1:8080/proxy.pac")
		if err != nil || !strings.Contains(dom, token) {
			t.Fatalf("chromium through the PAC: %v; the page lacks the site's token %s:\n%s\nchromium's stderr:\n%s\nrelay:\n%s",
				err, token, dom, lastLines(stderr, 30), lastLines(r.logs(), 30))
		}
	})
	t.Run("chromium ignores file:// PAC", func(t *testing.T) {
		pac, err := exec.Command(relayctlBin, "pac", "--proxy", "127.0.0.1:1080", "--http-proxy", "127.0.0.1:8080").Output()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "relaymesh.pac")
		writeFile(t, path, string(pac))
		if dom, _, _ := chromiumGet(t, "file://"+path); strings.Contains(dom, token) {
			t.Fatalf("chromium took a file:// PAC URL: docs/clients.md says it ignores them; correct it")
		}
	})

	t.Run("curl with relayctl env", func(t *testing.T) {
		for _, args := range []string{"", `--http ""`} { // HTTP proxy, then socks5h only
			script := fmt.Sprintf(`eval "$(%s env --shell posix %s)" && exec %s -sS --max-time 20 http://%s/`, relayctlBin, args, curl, siteName)
			out, err := inNear(ctx, "sh", "-c", script).CombinedOutput()
			if err != nil || !strings.Contains(string(out), token) {
				t.Errorf("relayctl env %s, then curl: %v\n%s", args, err, out)
			}
		}
	})
}

func requireChromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Need(t, "chromium not installed (%v): make test-deps installs it as root, from the Debian package chromium", err)
	}
	return p
}

// etcHosts gives the namespace ns its own /etc/hosts (ip netns exec
// mounts /etc/netns/NS/hosts over it), removed when the test ends.
func etcHosts(t *testing.T, ns, hosts string) {
	t.Helper()
	dir := filepath.Join("/etc/netns", ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	writeFile(t, filepath.Join(dir, "hosts"), hosts)
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func randomToken(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "relaymesh-site-" + hex.EncodeToString(b)
}

// startSite serves a page holding token at addr (opened in the caller's
// namespace) until the test ends.
func startSite(t *testing.T, addr, token string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><html><body><p id=\"token\">%s</p></body></html>\n", token)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// forwardBetween carries TCP connections to addr in the namespace from to
// addr in the namespace to, until the test ends.
func forwardBetween(t *testing.T, from, to, addr string) {
	t.Helper()
	var ln net.Listener
	inNetns(t, from, func() {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
	})
	dial := nsDialer(t, to)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := dial(addr)
				if err != nil {
					return
				}
				defer up.Close()
				pipeBoth(c, up)
			}()
		}
	}()
}

// pipeBoth copies a to b and b to a, half-closing each on EOF, until both
// directions end.
func pipeBoth(a, b net.Conn) {
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.(*net.TCPConn).CloseWrite()
		done <- struct{}{}
	}
	go copyHalf(a, b)
	go copyHalf(b, a)
	<-done
	<-done
}

// nsDialer dials TCP from the namespace ns: a thread of its own stays in
// it (the runtime ends the thread when its goroutine exits locked).
func nsDialer(t *testing.T, ns string) func(addr string) (net.Conn, error) {
	t.Helper()
	type dialReq struct {
		addr  string
		reply chan<- net.Conn
	}
	reqs := make(chan dialReq)
	ready := make(chan error, 1)
	go func() {
		// Locked, and put back in its namespace before it is unlocked: a
		// thread left locked in another namespace dies with its goroutine,
		// except the main thread, which stays, and this process's
		// /proc/net (the main thread's view) would show ns from then on.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ready <- err
			return
		}
		defer func() {
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			orig.Close()
		}()
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		ready <- err
		if err != nil {
			return
		}
		for r := range reqs {
			c, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
			if err != nil {
				c = nil
			}
			r.reply <- c
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("entering namespace %s: %v", ns, err)
	}
	t.Cleanup(func() { close(reqs) })
	return func(addr string) (net.Conn, error) {
		reply := make(chan net.Conn, 1)
		reqs <- dialReq{addr, reply}
		if c := <-reply; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("dial %s in %s failed", addr, ns)
	}
}

// startConnect starts relayctl connect (cmd) and waits until it says it
// listens, with want in that line; the returned func stops it.
func startConnect(t *testing.T, cmd *exec.Cmd, want string) func() {
	t.Helper()
	var log syncBuf
	return startConnectLogged(t, cmd, &log, want)
}

// startConnectLogged is startConnect writing connect's output to log.
func startConnectLogged(t *testing.T, cmd *exec.Cmd, log *syncBuf, want string) func() {
	t.Helper()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		line := ""
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.HasPrefix(l, "relayctl connect: SOCKS5 on") {
				line = l
			}
		}
		switch {
		case line != "" && strings.Contains(line, want):
			return stop
		case line != "":
			stop()
			t.Fatalf("relayctl connect does not route %s:\n%s", want, log.String())
		case time.Now().After(deadline):
			stop()
			t.Fatalf("relayctl connect did not start in 90 s:\n%s", log.String())
		}
		select {
		case <-exited:
			t.Fatalf("relayctl connect exited:\n%s", log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// syncBuf is a bytes.Buffer safe for a process's writes and the test's
// reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
