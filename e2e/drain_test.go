package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBoundedDrainSocketStates is docs/reliability.md case 12 on real relayd
// processes: the client half-closes, the server reads the EOF and then
// neither writes nor closes. Through 1 and 3 relays with a 4 s drain
// timeout, every relay closes fully within it: the client reads EOF, and
// no relayd holds a socket in CLOSE_WAIT or FIN_WAIT2 afterwards. While the
// drain runs those states are there (the check can see them).
func TestBoundedDrainSocketStates(t *testing.T) {
	// 4 s: the mid-drain check must come before the drain ends. With 2 s
	// and one look at 0.5 s, both subtests once found no half-closed
	// socket under make test's load (every package under the race
	// detector, two at a time), and passed alone.
	const drain = 4 * time.Second
	hold := make(chan struct{})
	defer close(hold)
	srv := startServer(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c) // until the client's half-close
		<-hold                        // then silent, and open
	})
	for _, hops := range []int{1, 3} {
		t.Run(fmt.Sprintf("%dhop", hops), func(t *testing.T) {
			relays := chainOf(t, hops, "--drain-timeout", drain.String())
			c, raw, err := xnetDial(t, relays[0].socks, srv.addr(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("bye")); err != nil {
				t.Fatal(err)
			}
			if err := raw.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			// The half-close reaches each relay in turn: look until the
			// states show, at most half the drain.
			for halfClosedSockets(t, relays) == 0 {
				if time.Since(start) > drain/2 {
					t.Fatalf("mid-drain (%v after the half-close): no relay socket in CLOSE_WAIT or FIN_WAIT2; the check cannot see them",
						time.Since(start).Round(time.Millisecond))
				}
				time.Sleep(50 * time.Millisecond)
			}
			_ = c.SetReadDeadline(time.Now().Add(drain + 5*time.Second))
			n, err := io.Copy(io.Discard, c)
			took := time.Since(start)
			if err != nil || n != 0 {
				t.Fatalf("after the drain: read %d bytes, %v (want EOF)", n, err)
			}
			// Each relay's drain starts when the half-close reaches it.
			if took > drain+time.Second {
				t.Fatalf("the relays closed %v after the half-close; drain timeout %v", took.Round(time.Millisecond), drain)
			}
			deadline := time.Now().Add(time.Second)
			for halfClosedSockets(t, relays) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d relay sockets still in CLOSE_WAIT or FIN_WAIT2 %v after the half-close",
						halfClosedSockets(t, relays), time.Since(start).Round(time.Millisecond))
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("%d relays closed fully %v after the half-close (drain timeout %v)", hops, took.Round(time.Millisecond), drain)
		})
	}
}

// halfClosedSockets counts the TCP sockets the relayd processes hold (by
// inode, from /proc/PID/fd) that are in CLOSE_WAIT or FIN_WAIT2.
func halfClosedSockets(t *testing.T, relays []*relayd) int {
	t.Helper()
	owned := map[string]bool{}
	for _, r := range relays {
		dir := filepath.Join("/proc", strconv.Itoa(r.cmd.Process.Pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
				owned[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	const finWait2, closeWait = "05", "08" // include/net/tcp_states.h, in hex
	// The relays' own view of their network namespace, not this process's
	// /proc/net: that is its main thread's, and a test that moved a locked
	// thread into another namespace can leave the main thread there.
	counted := map[string]bool{}
	for _, r := range relays {
		for _, table := range []string{"tcp", "tcp6"} {
			f, err := os.Open(filepath.Join("/proc", strconv.Itoa(r.cmd.Process.Pid), "net", table))
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			sc.Scan() // header
			for sc.Scan() {
				// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
				fields := strings.Fields(sc.Text())
				if len(fields) > 9 && owned[fields[9]] && (fields[3] == finWait2 || fields[3] == closeWait) {
					counted[fields[9]] = true
				}
			}
			f.Close()
		}
	}
	return len(counted)
}
