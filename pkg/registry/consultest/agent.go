// Package consultest runs a real Consul agent for tests: the binary that
// `make bin/consul` builds (Consul v1.14.8 from tools/consul), in -dev mode
// on free loopback ports. When it is missing, tests skip (fail under
// CI=true: testenv.Need), saying how to build it.
package consultest

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/envvar"
	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// Agent is one running (or killed) agent.
type Agent struct {
	// HTTP is the agent's HTTP API, host:port.
	HTTP string

	bin, dir string
	args     []string
	cmd      *exec.Cmd
	done     chan struct{}
	mu       sync.Mutex
	out      bytes.Buffer
}

// Start runs an agent for the test and kills it when the test ends. bin is
// the consul binary relative to the test's directory (e.g. "../bin/consul");
// $RELAYMESH_CONSUL_BIN (envvar.ConsulBin) overrides it.
func Start(t testing.TB, bin string) *Agent {
	t.Helper()
	if env := os.Getenv(envvar.ConsulBin); env != "" {
		bin = env
	} else {
		bin, _ = filepath.Abs(bin)
		if _, err := os.Stat(bin); err != nil {
			testenv.Need(t, "no Consul agent at %s: run `make bin/consul` (builds Consul v1.14.8 from tools/consul, ~4 min; make test does) or set $"+envvar.ConsulBin, bin)
		}
	}
	a := &Agent{bin: bin, dir: t.TempDir()}
	ports := freePorts(t, 4)
	a.HTTP = "127.0.0.1:" + strconv.Itoa(ports[0])
	a.args = []string{"agent", "-dev", "-node", "relaymesh-test", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-http-port", strconv.Itoa(ports[0]), "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
		"-server-port", strconv.Itoa(ports[1]), "-serf-lan-port", strconv.Itoa(ports[2]),
		"-serf-wan-port", strconv.Itoa(ports[3]), "-log-level", "warn"}
	a.Restart(t)
	t.Cleanup(a.Kill)
	return a
}

// freePorts returns n distinct free ports. The listeners stay open until
// all are chosen: closed one by one, the kernel can hand the same port out
// twice (the agent then refused to start, Serf's port "already configured
// for RPC").
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Restart runs the agent (again, on the same ports; in -dev mode it comes
// back empty) and waits until it has a leader.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	a.cmd = exec.Command(a.bin, a.args...)
	a.cmd.Dir = a.dir
	a.cmd.Stdout, a.cmd.Stderr = (*lockedWriter)(a), (*lockedWriter)(a)
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(a.cmd, a.done)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get("http://" + a.HTTP + "/v1/status/leader"); err == nil {
			var leader string
			_ = json.NewDecoder(resp.Body).Decode(&leader)
			resp.Body.Close()
			if leader != "" {
				return
			}
		}
		select {
		case <-a.done:
			t.Fatalf("consul agent exited:\n%s", a.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("consul agent has no leader after 30 s:\n%s", a.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill stops the agent at once, as a crash would.
func (a *Agent) Kill() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
}

// Output is what the agent printed so far.
func (a *Agent) Output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out.String()
}

// lockedWriter collects the agent's stdout and stderr under the lock.
type lockedWriter Agent

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}
