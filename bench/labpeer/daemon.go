package labpeer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/relaymesh/relaymesh/pkg/lab"
)

// Daemon is a process a benchmark started in a lab node, in its own
// process group, with its output in a log file.
type Daemon struct {
	What string    // "dante", "squid", "relayd", ...
	Node *lab.Node // where it runs
	Port int       // where it listens, on the node's address
	Cmd  *exec.Cmd
	Err  error // how it exited, once Done is closed
	Done chan struct{}

	log *os.File
}

// StartDaemon runs argv in node n (ip netns exec) in a new process group,
// appending its output to logPath. uid >= 0 chowns the log first (squid
// reopens it as the proxy user).
func StartDaemon(n *lab.Node, what string, port int, logPath string, uid, gid int, argv ...string) (*Daemon, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if uid >= 0 {
		_ = lf.Chown(uid, gid)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Netns}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("node %s: start %s: %w", n.Name, what, err)
	}
	d := &Daemon{What: what, Node: n, Port: port, Cmd: cmd, Done: make(chan struct{}), log: lf}
	go func() {
		d.Err = cmd.Wait()
		close(d.Done)
	}()
	return d, nil
}

// WaitListening polls (ss, inside the node) until the daemon listens on its
// port, it exits, ctx ends or deadline passes. logDir is named in errors.
func (d *Daemon) WaitListening(ctx context.Context, deadline time.Time, logDir string) error {
	addr := fmt.Sprintf("%s:%d", d.Node.Addr, d.Port)
	for {
		select {
		case <-d.Done:
			return fmt.Errorf("node %s: %s exited at start (%v); see its log in %s", d.Node.Name, d.What, d.Err, logDir)
		default:
		}
		out, _ := exec.CommandContext(ctx, "ip", "netns", "exec", d.Node.Netns, "ss", "-Hltn", "src", addr).Output()
		if strings.TrimSpace(string(out)) != "" {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: %s does not listen on %s", d.Node.Name, d.What, addr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// StopAll ends every daemon: SIGTERM to each main process first (dante's
// mother ends its own children), SIGKILL to the process group of any still
// running after timeout, then anything left in each group.
func StopAll(ds []*Daemon, timeout time.Duration, logf func(format string, args ...any)) {
	for _, d := range ds {
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(timeout)
	for _, d := range ds {
		select {
		case <-d.Done:
		case <-deadline:
		}
	}
	for _, d := range ds {
		select {
		case <-d.Done:
		default:
			logf("%s on %s did not stop in %v: killing", d.What, d.Node.Name, timeout)
			_ = syscall.Kill(-d.Cmd.Process.Pid, syscall.SIGKILL)
			<-d.Done
		}
		KillGroup(d.Cmd.Process.Pid)
		d.log.Close()
	}
}

// KillStrays kills the live process groups of processes whose command line
// ours accepts: what an earlier, interrupted run of a benchmark left.
func KillStrays(ours func(cmdline string) bool, logf func(format string, args ...any)) {
	groups := map[int]string{}
	ForProcs(func(_, pg int, cmdline string) {
		if ours(cmdline) {
			groups[pg] = cmdline
		}
	})
	for pg, cl := range groups {
		if pg <= 1 {
			continue
		}
		logf("killing stray process group %d: %s", pg, cl)
		_ = syscall.Kill(-pg, syscall.SIGTERM)
		time.Sleep(500 * time.Millisecond)
		KillGroup(pg)
	}
}
