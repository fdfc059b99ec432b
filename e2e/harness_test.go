// Package e2e runs the real relayd binary on loopback and drives it with real
// clients: curl, golang.org/x/net/proxy, and third-party proxies as hops.
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/testenv"
)

var relaydBin, relayctlBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "relaymesh-e2e")
	if err != nil {
		panic(err)
	}
	relaydBin = filepath.Join(dir, "relayd")
	relayctlBin = filepath.Join(dir, "relayctl")
	var race []string
	if os.Getenv("RELAYMESH_E2E_RACE") != "" {
		race = []string{"-race"} // the binaries themselves under the race detector
	}
	for _, b := range []struct{ out, pkg string }{{relaydBin, "../cmd/relayd"}, {relayctlBin, "../cmd/relayctl"}} {
		build := exec.Command("go", append(append([]string{"build", "-o", b.out}, race...), b.pkg)...)
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", b.pkg+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// full says to run the long settings of the reliability cases (`make
// reliability-full`): the test command runs short ones.
func full() bool { return os.Getenv("RELAYMESH_FULL") != "" }

// relayd is one running relayd process.
type relayd struct {
	cmd                *exec.Cmd
	socks, http, admin string
	logMu              sync.Mutex
	log                strings.Builder
	exited             chan struct{}
}

// startRelayd runs relayd with the given extra flags on ephemeral loopback
// ports and waits until it reports its addresses.
func startRelayd(t testing.TB, args ...string) *relayd {
	t.Helper()
	return startRelaydWrapped(t, nil, args...)
}

// startRelaydWrapped is startRelayd with relayd run under wrap (e.g.
// prlimit --nofile=128:128 --).
func startRelaydWrapped(t testing.TB, wrap []string, args ...string) *relayd {
	t.Helper()
	return startRelaydBin(t, relaydBin, wrap, args...)
}

// startRelaydBin is startRelaydWrapped with another relayd binary.
func startRelaydBin(t testing.TB, bin string, wrap []string, args ...string) *relayd {
	t.Helper()
	base := []string{"run", "--log-format", "json", "--log-level", "debug",
		"--socks", "127.0.0.1:0", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--shutdown-grace", "1s"} // tests override any of these: the last flag wins
	argv := append(append(append([]string{}, wrap...), bin), append(base, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	// The race runtime sleeps 1 s at exit by default; exit timing is tested.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &relayd{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			r.logMu.Lock()
			r.log.WriteString(line + "\n")
			r.logMu.Unlock()
			if !sent && strings.Contains(line, `"relayd listening"`) {
				var v struct{ Socks, HTTP, Admin string }
				err := json.Unmarshal([]byte(line), &v)
				r.socks, r.http, r.admin = v.Socks, v.HTTP, v.Admin
				ready <- err
				sent = true
			}
		}
		if !sent {
			ready <- fmt.Errorf("relayd exited before listening")
		}
	}()
	go func() { _ = cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() { r.stop(t) })
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("relayd %v: %v\n%s", args, err, r.logs())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("relayd did not start\n%s", r.logs())
	}
	return r
}

func (r *relayd) logs() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.log.String()
}

func (r *relayd) stop(t testing.TB) {
	select {
	case <-r.exited:
		r.checkRaces(t)
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	r.checkRaces(t)
}

// checkRaces fails the test when relayd (built with RELAYMESH_E2E_RACE=1)
// reported a data race.
func (r *relayd) checkRaces(t testing.TB) {
	time.Sleep(50 * time.Millisecond) // let the log reader drain
	if log := r.logs(); strings.Contains(log, "WARNING: DATA RACE") {
		t.Errorf("relayd reported a data race:\n%s", log)
	}
}

// chainOf starts n relays hop by hop (each points at the next with --next)
// and returns them entry first.
func chainOf(t testing.TB, n int, extra ...string) []*relayd {
	t.Helper()
	out := make([]*relayd, n)
	for i := n - 1; i >= 0; i-- {
		args := append([]string{"--allow-private"}, extra...)
		if i+1 < n {
			args = append(args, "--next", "socks5://"+out[i+1].socks)
		}
		out[i] = startRelayd(t, args...)
	}
	return out
}

// server is an in-process TCP server for tests.
type server struct {
	ln   net.Listener
	wg   sync.WaitGroup
	conn atomicCounter
}

type atomicCounter struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCounter) inc() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *atomicCounter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func startServer(t testing.TB, handle func(net.Conn)) *server {
	t.Helper()
	return startServerAt(t, "127.0.0.1:0", handle)
}

// startServerAt is startServer listening on addr.
func startServerAt(t testing.TB, addr string, handle func(net.Conn)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conn.inc()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

// echo copies everything back and half-closes after EOF.
func echo(c net.Conn) {
	_, _ = io.Copy(c, c)
	_ = c.(*net.TCPConn).CloseWrite()
}

func requireCmd(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Need(t, "%s not installed (%v): make test-deps installs it as root, from Debian packages (curl, microsocks, dante-server)", name, err)
	}
	return p
}
