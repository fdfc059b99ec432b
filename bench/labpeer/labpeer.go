// Package labpeer is what the lab benchmarks (bench/split, bench/ttfb)
// share: it runs third-party proxies (dante, squid) as chained hops on lab
// relay nodes and manages their process groups so a benchmark leaves
// nothing behind, and it reads the lab's self-check, the machine, and
// signals.
package labpeer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// DanteConfig is a sockd config listening on addr:port with no
// authentication; with nextAddr it routes every CONNECT through the sockd on
// nextAddr:port (hop by hop, like relayd's next).
func DanteConfig(logPath, addr, nextAddr string, port int) string {
	var s strings.Builder
	fmt.Fprintf(&s, "# Written by bench/labpeer.\nlogoutput: %s\n", logPath)
	fmt.Fprintf(&s, "internal: %s port = %d\nexternal: %s\n", addr, port, addr)
	s.WriteString("clientmethod: none\nsocksmethod: none\n")
	s.WriteString("user.privileged: root\nuser.unprivileged: nobody\n")
	s.WriteString("client pass {\n\tfrom: 0.0.0.0/0 to: 0.0.0.0/0\n}\n")
	s.WriteString("socks pass {\n\tfrom: 0.0.0.0/0 to: 0.0.0.0/0\n}\n")
	if nextAddr != "" {
		fmt.Fprintf(&s, "route {\n\tfrom: 0.0.0.0/0 to: 0.0.0.0/0 via: %s port = %d\n\tproxyprotocol: socks_v5\n\tcommand: connect\n}\n", nextAddr, port)
	}
	return s.String()
}

// SquidConfig: cache_log goes to stderr, which the driver points at
// <labdir>/<node>.squid.log: squid writes its log as the proxy user, who
// cannot enter the lab directory (0700), and for the same reason coredump_dir
// is none. No DNS servers: lab names resolve from /etc/hosts.
func SquidConfig(dir, node, addr, nextAddr string, port int) string {
	var s strings.Builder
	s.WriteString("# Written by bench/labpeer.\n")
	fmt.Fprintf(&s, "http_port %s:%d\n", addr, port)
	s.WriteString("http_access allow all\ncache deny all\naccess_log none\n")
	s.WriteString("cache_log /dev/stderr\n")
	fmt.Fprintf(&s, "pid_filename %s\n", filepath.Join(dir, node+".squid.pid"))
	s.WriteString("coredump_dir none\nshutdown_lifetime 0 seconds\n")
	fmt.Fprintf(&s, "visible_hostname %s\npinger_enable off\ndns_nameservers 127.0.0.1\n", node)
	if nextAddr != "" {
		fmt.Fprintf(&s, "cache_peer %s parent %d 0 no-query no-digest default\nnever_direct allow all\n", nextAddr, port)
	}
	return s.String()
}

// SquidService is squid's -n service name (its shared memory and default
// paths): one per lab node, so instances never share anything.
func SquidService(labName, node string) string {
	var s strings.Builder
	for _, ch := range "rm" + labName + node {
		if ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' {
			s.WriteRune(ch)
		}
	}
	return s.String()
}

// SetGroup puts cmd in its own process group (terminal signals reach only
// the driver, which cleans up) and makes cancellation kill the whole group.
func SetGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
}

// KillGroup SIGKILLs any process still in process group pgid (dante's
// children) and waits briefly for them to go.
func KillGroup(pgid int) {
	for i := 0; i < 50; i++ {
		left := GroupMembers(pgid)
		if len(left) == 0 {
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "labpeer: process group %d still has members %v\n", pgid, GroupMembers(pgid))
}

// GroupMembers lists live (non-zombie) processes of process group pgid.
func GroupMembers(pgid int) []int {
	var out []int
	ForProcs(func(pid, pg int, _ string) {
		if pg == pgid {
			out = append(out, pid)
		}
	})
	return out
}

// ForProcs calls fn for every live (not zombie) process in /proc with its
// process group and command line (NULs as spaces).
func ForProcs(fn func(pid, pgid int, cmdline string)) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.State == "Z" {
			continue
		}
		cl, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "cmdline"))
		fn(p.PID, st.PGRP, strings.ReplaceAll(string(cl), "\x00", " "))
	}
}
