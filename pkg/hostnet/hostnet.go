// Package hostnet is this host's TCP facts, as the planner's model needs
// them: the sysctl socket limits of the network namespace the process runs
// in (what a relay reports as /v1/info's limits, what a planner assumes of
// its own host), the windows autotuning reaches with them, one socket's
// TCP_INFO, and the one setter of integer socket options (SetInt).
// Writing sysctls (the lab) is not here.
package hostnet

import (
	"os"
	"strconv"
	"strings"
)

// SocketLimits are this host's socket limits: what the planner needs to
// know about the windows its segments can have. It is /v1/info's "limits"
// object (adminapi.Limits is this type); its JSON keys are the wire's.
type SocketLimits struct {
	RmemMaxBytes      int64  `json:"rmem_max_bytes"`      // net.core.rmem_max
	WmemMaxBytes      int64  `json:"wmem_max_bytes"`      // net.core.wmem_max
	TCPRmemMaxBytes   int64  `json:"tcp_rmem_max_bytes"`  // third field of net.ipv4.tcp_rmem: autotuning limit
	TCPWmemMaxBytes   int64  `json:"tcp_wmem_max_bytes"`  // third field of net.ipv4.tcp_wmem
	CongestionControl string `json:"congestion_control"`  // net.ipv4.tcp_congestion_control
	WindowBytesApprox int64  `json:"window_bytes_approx"` // ~ receive window autotuning reaches (WindowOfRmem)
}

// ReadLimits reads the socket limits of the network namespace this process
// runs in. Fields it cannot read stay zero.
func ReadLimits() SocketLimits {
	var l SocketLimits
	l.RmemMaxBytes = ReadSysctlInt("net/core/rmem_max", 0)
	l.WmemMaxBytes = ReadSysctlInt("net/core/wmem_max", 0)
	l.TCPRmemMaxBytes = ReadSysctlInt("net/ipv4/tcp_rmem", 2)
	l.TCPWmemMaxBytes = ReadSysctlInt("net/ipv4/tcp_wmem", 2)
	l.CongestionControl = CongestionControl()
	l.WindowBytesApprox = WindowOfRmem(l.TCPRmemMaxBytes)
	return l
}

// ReadSysctlInt is the field'th (from 0) whitespace-separated integer of
// /proc/sys/<path> (e.g. "net/ipv4/tcp_rmem", 2: its max); 0 when it
// cannot be read.
func ReadSysctlInt(path string, field int) int64 {
	b, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if field >= len(f) {
		return 0
	}
	n, _ := strconv.ParseInt(f[field], 10, 64)
	return n
}

// windowScalingRatio is the share of tcp_rmem's max that becomes receive
// window: the kernel keeps the rest for sk_buff overhead. Measured in the
// lab (bench/results/split.md): with tcp_rmem max 256 KiB, direct moved
// 25.3 Mbit/s over 50 ms, a window of 158 KB = 0.60 of 262144 bytes.
const windowScalingRatio = 0.60

// WindowOfRmem is the receive window autotuning reaches with tcp_rmem's
// max at rmemMaxBytes.
func WindowOfRmem(rmemMaxBytes int64) int64 {
	return int64(float64(rmemMaxBytes) * windowScalingRatio)
}

// sendWindowRatio is the share of tcp_wmem's max a sender keeps in
// flight: the send buffer holds sent-but-unacknowledged data and the
// sk_buff overhead on it. Measured in the lab (docs/planning.md): a sender
// at tcp_wmem max 4 MiB over 225 ms kept 4.07 MB in flight.
const sendWindowRatio = 0.97

// SendWindowOfWmem is the most a sender keeps in flight with tcp_wmem's
// max at wmemMaxBytes; 0 (unknown) for 0.
func SendWindowOfWmem(wmemMaxBytes int64) int64 {
	return int64(float64(wmemMaxBytes) * sendWindowRatio)
}

// RecvWindowBytes is this host's (network namespace's) receive window,
// from tcp_rmem's max; 0 when it cannot be read.
func RecvWindowBytes() int64 {
	return WindowOfRmem(ReadSysctlInt("net/ipv4/tcp_rmem", 2))
}

// SendWindowBytes is this host's send window, from tcp_wmem's max; 0
// when it cannot be read.
func SendWindowBytes() int64 {
	return SendWindowOfWmem(ReadSysctlInt("net/ipv4/tcp_wmem", 2))
}

// CongestionControl is this host's (network namespace's) default TCP
// congestion control, net.ipv4.tcp_congestion_control; "" when it cannot
// be read.
func CongestionControl() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
