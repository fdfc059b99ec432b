package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// runRelayctl runs relayctl with args and returns what it printed on
// stdout.
func runRelayctl(args ...string) (string, error) {
	c := rootCmd()
	var out bytes.Buffer
	c.SetArgs(args)
	c.SetOut(&out)
	c.SetErr(&bytes.Buffer{})
	err := c.Execute()
	return out.String(), err
}

// noSOCKS4 fails when pac names a SOCKS (version 4) proxy: the relays do
// not speak it, and a browser that takes it resolves names itself.
func noSOCKS4(t *testing.T, pac string) {
	t.Helper()
	if strings.Contains(pac, "SOCKS ") {
		t.Fatalf("PAC names a SOCKS (v4) proxy:\n%s", pac)
	}
}

func TestWritePAC(t *testing.T) {
	for _, c := range []struct {
		name         string
		spec         pacSpec
		want, reject []string
	}{{
		name: "connect: every host, no fallback",
		spec: pacSpec{SOCKS: "127.0.0.1:1080", HTTP: "127.0.0.1:8080"},
		want: []string{
			`host == "localhost"`, `/^127\.\d+\.\d+\.\d+$/.test(host)`, `host == "::1"`,
			"    return \"DIRECT\";\n  return \"SOCKS5 127.0.0.1:1080; PROXY 127.0.0.1:8080\";\n}",
			"no DIRECT fallback",
		},
		reject: []string{"shExpMatch(host, \"*.jp\")", `PROXY 127.0.0.1:8080; DIRECT`},
	}, {
		name: "hosts with fallback",
		spec: pacSpec{Header: []string{"plan: r1", "evil\nreturn"}, Hosts: []string{"*.jp", `a"b`}, SOCKS: "10.0.0.1:1080", FallbackDirect: true},
		want: []string{
			"// plan: r1\n", "// evil return\n",
			`if (shExpMatch(host, "*.jp") || shExpMatch(host, "a\"b"))`,
			`return "SOCKS5 10.0.0.1:1080; DIRECT";`,
			"  return \"DIRECT\";\n}",
		},
		reject: []string{"PROXY"},
	}, {
		name:   "HTTP proxy only",
		spec:   pacSpec{HTTP: "[::1]:8080"},
		want:   []string{`return "PROXY [::1]:8080";`},
		reject: []string{"SOCKS5 "},
	}, {
		name:   "direct plan",
		spec:   pacSpec{Hosts: []string{"*.jp"}},
		want:   []string{"every host direct", "function FindProxyForURL(url, host) {\n  return \"DIRECT\";\n}"},
		reject: []string{"SOCKS5", "PROXY"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			writePAC(&b, c.spec)
			got := b.String()
			noSOCKS4(t, got)
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("PAC lacks %q:\n%s", w, got)
				}
			}
			for _, r := range c.reject {
				if strings.Contains(got, r) {
					t.Errorf("PAC has %q:\n%s", r, got)
				}
			}
		})
	}
}

func TestPACSpecValidate(t *testing.T) {
	for _, bad := range []pacSpec{
		{SOCKS: "127.0.0.1"},
		{SOCKS: `127.0.0.1:1080"; DIRECT`},
		{HTTP: "a b:80"},
		{SOCKS: "127.0.0.1:1080", Hosts: []string{"*.jp\n"}},
		{SOCKS: "127.0.0.1:1080", Hosts: []string{""}},
	} {
		if err := bad.validate(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	if err := (pacSpec{SOCKS: "[::1]:1080", HTTP: "proxy.example:8080", Hosts: []string{"*.jp"}}).validate(); err != nil {
		t.Error(err)
	}
}

// The PAC endpoint: GET and HEAD at /proxy.pac only, the PAC MIME type,
// the same text relayctl pac writes for the same addresses, and a
// listener on every interface named by the address the browser reached.
func TestPACHandler(t *testing.T) {
	srv := httptest.NewServer(pacHandler(func() pacSpec {
		return pacSpec{SOCKS: "0.0.0.0:1080", HTTP: "127.0.0.1:8080"}
	}))
	defer srv.Close()
	get := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	resp, body := get(http.MethodGet, pacPath)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != pacContentType {
		t.Fatalf("GET %s: %s, Content-Type %q", pacPath, resp.Status, resp.Header.Get("Content-Type"))
	}
	want, err := runRelayctl("pac", "--proxy", "127.0.0.1:1080", "--http-proxy", "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	if body != want {
		t.Fatalf("served:\n%s\nrelayctl pac writes:\n%s", body, want)
	}
	resp, body = get(http.MethodHead, pacPath)
	if resp.StatusCode != 200 || body != "" || resp.Header.Get("Content-Type") != pacContentType {
		t.Fatalf("HEAD: %s, %q, body %q", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions} {
		if resp, _ := get(m, pacPath); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %s, Allow %q", m, resp.Status, resp.Header.Get("Allow"))
		}
	}
	for _, p := range []string{"/", "/proxy.pac/x", "/wpad.dat"} {
		if resp, _ := get(http.MethodGet, p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s, want 404", p, resp.Status)
		}
	}
}

func TestReachedAt(t *testing.T) {
	local := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8080}
	for in, want := range map[string]string{
		"0.0.0.0:1080":   "192.0.2.7:1080",
		"[::]:1080":      "192.0.2.7:1080",
		":1080":          "192.0.2.7:1080",
		"127.0.0.1:1080": "127.0.0.1:1080",
		"proxy.lan:1080": "proxy.lan:1080",
	} {
		if got := reachedAt(in, local); got != want {
			t.Errorf("reachedAt(%q) = %q, want %q", in, got, want)
		}
	}
	for local, want := range map[string]string{"::ffff:127.0.0.1": "127.0.0.1:1080", "::1": "[::1]:1080"} {
		if got := reachedAt("[::]:1080", &net.TCPAddr{IP: net.ParseIP(local)}); got != want {
			t.Errorf("reachedAt([::]:1080) reached at %s = %q, want %q", local, got, want)
		}
	}
}

// relayctl pac without --dst needs a proxy; with a matrix (no registry,
// so no relay addresses) and no --proxy it says so, instead of naming a
// relay with an empty name.
func TestPACCommandErrors(t *testing.T) {
	if _, err := runRelayctl("pac"); err == nil || !strings.Contains(err.Error(), "--proxy") {
		t.Errorf("no --proxy, no --dst: %v", err)
	}
	_, err := runRelayctl("pac", "--matrix", "../../planner/testdata/split4.json", "--dst", "srv", "--hosts", "*.example")
	if err == nil || !strings.Contains(err.Error(), "holds no relay addresses: give --proxy") || strings.Contains(err.Error(), "relay  ") {
		t.Errorf("--matrix without --proxy: %v", err)
	}
	out, err := runRelayctl("pac", "--matrix", "../../planner/testdata/split4.json", "--dst", "srv", "--hosts", "*.example", "--proxy", "127.0.0.1:1080")
	if err != nil {
		t.Fatal(err)
	}
	noSOCKS4(t, out)
	if !strings.Contains(out, "// plan: ") || !strings.Contains(out, `return "SOCKS5 127.0.0.1:1080";`) {
		t.Errorf("--matrix with --proxy:\n%s", out)
	}
	if _, err := runRelayctl("pac", "--proxy", "127.0.0.1:1080;DIRECT"); err == nil {
		t.Error("a --proxy that breaks out of the PAC string: accepted")
	}
}

// relayctl pac --serve serves what relayctl pac prints, until its context
// ends.
func TestPACServe(t *testing.T) {
	args := []string{"pac", "--proxy", "127.0.0.1:1080", "--hosts", "*.jp", "--fallback-direct"}
	want, err := runRelayctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := rootCmd()
	stderr := &lockedBuffer{}
	c.SetArgs(append(args, "--serve", "127.0.0.1:0"))
	c.SetOut(io.Discard)
	c.SetErr(stderr)
	done := make(chan error, 1)
	go func() { done <- c.ExecuteContext(ctx) }()
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if _, rest, ok := strings.Cut(stderr.String(), "serving "); ok {
			url = strings.TrimSpace(rest)
		} else if time.Now().After(deadline) {
			t.Fatalf("relayctl pac --serve did not say where it serves: %q", stderr.String())
		}
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != pacContentType || string(body) != want {
		t.Fatalf("GET %s: %s %q:\n%s\nwant:\n%s", url, resp.Status, resp.Header.Get("Content-Type"), body, want)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("relayctl pac --serve did not stop when its context ended")
	}
}

// lockedBuffer is a bytes.Buffer a command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
