package relay

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// A relay's file descriptors are its sockets: each tunnel holds two (the
// conn it accepted and the one it dialed onward; pkg/tunnel splices
// through a pipe only while bytes move), and a UDP association its control
// conn and its UDP socket. The rest is a small reserve: the listeners, the
// admin API's conns, warm relay links, probes, registry and log files, the
// tunnels' shared pipes. A relay that ran out would fail accept and leave
// clients in the kernel's queue until they time out; instead it counts the
// conns it holds and refuses one past the budget as it arrives
// (relaymesh_denials_total{rule="max_fds"}), and limits.max_conns and
// limits.max_relay_conns, unset, are derived from the limit as HAProxy
// derives its maxconn.

// fdsPerConn is what one tracked conn costs: itself and its onward conn.
const fdsPerConn = 2

// reservedFDs is what the relay keeps outside the tunnels' budget:
// maxAdminConns for the admin API, and 512 for the rest (listeners, warm
// links, probes, registry, logs, and up to 128 for pkg/tunnel's idle
// pipes). Under a small file limit the reserve is a quarter of it
// instead: the tunnels are what the relay is for.
const reservedFDs = maxAdminConns + 512

// fileLimit raises this process's soft RLIMIT_NOFILE to its hard limit
// (the Go runtime does so at start too; this makes it explicit for a relay
// embedded elsewhere) and returns the soft limit now in force; 0 when it
// cannot be read.
func fileLimit() uint64 {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	return lim.Cur
}

// connBudget is how many conns (each with its onward conn) fit under a
// file limit of limit descriptors, udpAssociations of them with a UDP
// socket besides: at least 1. A limit of 0 (unknown) gives a budget of 0,
// no bound.
func connBudget(limit uint64, udpAssociations int) int {
	if limit == 0 {
		return 0
	}
	reserve := min(reservedFDs+int64(udpAssociations), int64(limit)/4)
	return int(max((int64(limit)-reserve)/fdsPerConn, 1))
}

// deriveConnLimits fills limits.max_conns and limits.max_relay_conns left
// at 0 with budget (each pool may hold all of it: an entry relay's tunnels
// are clients', a middle relay's relay conns; the budget bounds both
// together), and warns of a set value the budget cannot hold.
func (p *preflight) deriveConnLimits(l *Limits, budget int, limit uint64) {
	for _, f := range []struct {
		key string
		v   *int
	}{{"limits.max_conns", &l.MaxConns}, {"limits.max_relay_conns", &l.MaxRelayConns}} {
		switch {
		case *f.v == 0 && budget == 0:
			*f.v = fallbackMaxConns
		case *f.v == 0:
			*f.v = budget
		case budget > 0 && *f.v > budget:
			p.warnings = append(p.warnings, fmt.Sprintf("%s is %d, but the file limit (RLIMIT_NOFILE %d) holds %d conns with their onward conns: past that new conns are refused (max_fds); raise LimitNOFILE (ulimit -n) or leave %s unset to follow it",
				f.key, *f.v, limit, budget, f.key))
		}
	}
}

// fallbackMaxConns is max_conns when the file limit cannot be read.
const fallbackMaxConns = 4096
