package e2e

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Ports handed to a process that binds them later. A port found free by
// listening on :0 and closing again comes from the ephemeral range, where the
// kernel hands it straight to the next outgoing connection or :0 listener of
// any parallel test (a relayd's admin once failed "address already in use"
// that way). These come from below the default ephemeral range
// (net.ipv4.ip_local_port_range starts at 32768), where only another explicit
// bind can take them, and a process never gets the same one twice.
const (
	reservedPortLow  = 12000
	reservedPortHigh = 32000 // exclusive
)

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// freePort returns a loopback port outside the ephemeral range that was free
// when checked and that no other caller in this process has been given.
func freePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		port := reservedPortLow + rand.IntN(reservedPortHigh-reservedPortLow)
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken by someone else: try another
		}
		ln.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatal("no free loopback port found in 200 tries")
	return 0
}

// freeAddr is freePort as a host:port.
func freeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
}
