package labpeer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/relaymesh/relaymesh/pkg/lab"
)

// Machine describes where a benchmark ran.
type Machine struct {
	Nproc    int    `json:"nproc"`
	Kernel   string `json:"kernel"`
	CPU      string `json:"cpu,omitempty"`
	Go       string `json:"go"`
	Hostname string `json:"hostname,omitempty"`
}

// MachineInfo reads this machine's description.
func MachineInfo() Machine {
	m := Machine{Nproc: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	m.Hostname, _ = os.Hostname()
	return m
}

// Logf logs a benchmark's progress to stderr with the time of day.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Relayctl runs the relayctl binary at bin in its own process group (so a
// benchmark stopped midway can kill what it started) and returns its
// combined output.
func Relayctl(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	SetGroup(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// LabStatus reads a running lab's self-check (`relayctl lab status -o
// json`): valid is nil when the status could not be read, and problems
// then says why.
func LabStatus(ctx context.Context, relayctl, stateRoot, name string) (valid *bool, problems []string) {
	out, err := Relayctl(ctx, relayctl, "lab", "--state-dir", stateRoot, "status", name, "-o", "json")
	if err != nil {
		return nil, []string{fmt.Sprintf("lab status: %v: %s", err, strings.TrimSpace(out))}
	}
	var st lab.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, []string{fmt.Sprintf("lab status: %v", err)}
	}
	return &st.Valid, st.Problems
}

// FlushTCPMetrics forgets the kernel's cached per-destination TCP metrics
// (ssthresh, RTT) in every node, so no run starts from the one before.
func FlushTCPMetrics(ctx context.Context, s *lab.State) {
	for _, n := range s.Nodes {
		_ = exec.CommandContext(ctx, "ip", "-n", n.Netns, "tcp_metrics", "flush", "all").Run()
	}
}

// CancelOnSignal returns a context that SIGINT or SIGTERM cancels. The
// benchmark's cleanup runs with its own context after that, and further
// signals are swallowed (logged) until the process exits, so a second ^C
// cannot leave a lab or a peer behind.
func CancelOnSignal() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			Logf("got %v: stopping after cleanup", s)
			cancel()
		}
	}()
	return ctx, cancel
}

// Median is the median of xs (the mean of the middle two for an even
// count), 0 for none. It sorts xs in place.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	sort.Float64s(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
