package tunnel

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// An idle tunnel holds its two sockets and nothing else: io.Copy's splice
// held a pipe (two descriptors) per direction for the tunnel's life, six
// descriptors a tunnel, which is what capped a relay at a third of its
// file limit in tunnels.
func TestIdleTunnelHoldsNoPipe(t *testing.T) {
	const tunnels = 20
	before := openFDs(t)
	var clients, servers []*net.TCPConn
	var dones []chan Result
	for range tunnels {
		client, server, done := setup(t, Options{})
		clients, servers, dones = append(clients, client), append(servers, server), append(dones, done)
	}
	// Every tunnel moved bytes both ways, then went quiet.
	buf := make([]byte, 5)
	for i := range clients {
		if _, err := clients[i].Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(servers[i], buf); err != nil {
			t.Fatal(err)
		}
		if _, err := servers[i].Write([]byte("world")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(clients[i], buf); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	// Four sockets a tunnel live in this process (client, a, b, server).
	// Beyond them: the pool's empty pipes, as many as were in use at one
	// time (here a burst or two), not two per tunnel.
	extra := openFDs(t) - before - 4*tunnels
	if extra > 8 {
		t.Errorf("%d descriptors beyond the tunnels' sockets: idle tunnels hold pipes", extra)
	}
	for i := range clients {
		clients[i].Close()
		servers[i].Close()
		<-dones[i]
	}
}

// Bytes arrive whole and in order both ways, through many bursts (the pipe
// given back and taken again between them) and through one large one.
func TestSpliceCopyIntegrity(t *testing.T) {
	client, server, done := setup(t, Options{})
	payload := make([]byte, 8<<20)
	_, _ = rand.Read(payload)
	go func() {
		for off := 0; off < len(payload); off += 64 << 10 {
			_, _ = client.Write(payload[off:min(off+64<<10, len(payload))])
			if off%(1<<20) == 0 {
				time.Sleep(time.Millisecond) // let the pipe go back now and then
			}
		}
		_ = client.CloseWrite()
	}()
	got, err := io.ReadAll(server)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("server got %d bytes (%v), want the %d sent, equal", len(got), err, len(payload))
	}
	_, _ = server.Write(payload[:1<<20])
	_ = server.CloseWrite()
	back, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(back, payload[:1<<20]) {
		t.Fatalf("client got %d bytes (%v)", len(back), err)
	}
	if res := <-done; res.Err != nil || res.AToB != int64(len(payload)) || res.BToA != 1<<20 {
		t.Fatalf("result %+v", res)
	}
}

// With no descriptor left for a pipe, the copy goes on through user space:
// a process out of descriptors slows, it does not lose or hold bytes.
func TestSpliceCopyWithoutPipes(t *testing.T) {
	old := pipe2
	pipe2 = func([]int, int) error { return unix.EMFILE }
	t.Cleanup(func() { pipe2 = old })
	pipes.drop()
	client, server, done := setup(t, Options{})
	go func() {
		_, _ = client.Write([]byte("no pipe needed"))
		_ = client.CloseWrite()
	}()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "no pipe needed" {
		t.Fatalf("server got %q (%v)", got, err)
	}
	server.Close()
	if res := <-done; res.AToB != int64(len(got)) {
		t.Fatalf("result %+v", res)
	}
}

// A pipe that still holds bytes (a copy that failed mid-burst) is closed,
// never pooled: another tunnel would receive them.
func TestPipeWithBytesIsNotPooled(t *testing.T) {
	pipes.drop()
	p, err := pipes.get()
	if err != nil {
		t.Fatal(err)
	}
	p.inPipe = 3
	pipes.put(p)
	if len(pipes.idle) != 0 {
		t.Fatal("a pipe holding bytes went back to the pool")
	}
	if _, err := unix.FcntlInt(uintptr(p.r), unix.F_GETFD, 0); err == nil {
		t.Fatal("the pipe was not closed")
	}
}

// A burst through a tunnel allocates nothing: a relay holding thousands of
// tunnels wakes each for every few bytes, and garbage per wake grew its
// heap with the load.
func TestSpliceBurstAllocatesNothing(t *testing.T) {
	client, server, done := setup(t, Options{IdleTimeout: time.Minute})
	out, in := []byte("ping"), make([]byte, 4)
	burst := func() {
		if _, err := client.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(server, in); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		burst()
	}
	if allocs := testing.AllocsPerRun(200, burst); allocs >= 1 {
		t.Errorf("%.1f allocations a burst, want none", allocs)
	}
	client.Close()
	server.Close()
	<-done
}

// Reading a socket's TCP_INFO again allocates nothing: the idle watch and
// the learnt rates read every tunnel's sockets every few seconds.
func TestStatsReaderAllocatesNothing(t *testing.T) {
	a, _ := tcpPair(t)
	r := NewStatsReader(a)
	if !r.Read().Valid {
		t.Fatal("no TCP_INFO")
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = r.Read() }); allocs >= 1 {
		t.Errorf("Read: %.1f allocations, want none", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = r.sinceLastRecv() }); allocs >= 1 {
		t.Errorf("sinceLastRecv: %.1f allocations, want none", allocs)
	}
}
