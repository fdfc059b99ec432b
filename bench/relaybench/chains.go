package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type chain struct {
	procs []*proc
	entry string // host:port the client dials
	front string
}

func (ch *chain) stop() {
	// Stop entry first so no new connections go down the chain.
	for _, p := range ch.procs {
		p.stop()
	}
}

func (ch *chain) pids() []int {
	var ps []int
	for _, p := range ch.procs {
		ps = append(ps, p.cmd.Process.Pid)
	}
	return ps
}

// startChain starts hops relays, last hop first, each pointing at the next.
func startChain(c *config, k *kindSpec, hops int, tag string) (*chain, error) {
	bin, err := k.binary(c)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ch, err, retry := tryStartChain(c, k, bin, hops, fmt.Sprintf("%s-a%d", tag, attempt))
		if err == nil {
			return ch, nil
		}
		lastErr = err
		if !retry {
			break
		}
	}
	return nil, lastErr
}

func tryStartChain(c *config, k *kindSpec, bin string, hops int, tag string) (*chain, error, bool) {
	ports := make([]int, hops)
	for i := range ports {
		ports[i] = freePort()
	}
	ch := &chain{front: k.front, procs: make([]*proc, hops)}
	for i := hops - 1; i >= 0; i-- {
		in := &instance{idx: i, port: ports[i], alloc: freePort}
		if i+1 < hops {
			in.nextPort = ports[i+1]
			in.rest = ports[i+1:]
		}
		in.dir = filepath.Join(c.workDir, fmt.Sprintf("%s-%s-h%d-r%d", tag, k.name, hops, i))
		if err := os.MkdirAll(in.dir, 0o755); err != nil {
			return nil, err, false
		}
		args, err := k.args(c, in)
		if err != nil {
			ch.stopStarted()
			return nil, err, false
		}
		if in.entryPort == 0 {
			in.entryPort = in.port
		}
		p, err := startProc(fmt.Sprintf("%s[%d]", k.name, i), bin, args, in.dir)
		if err != nil {
			ch.stopStarted()
			return nil, fmt.Errorf("start %s: %v", k.name, err), false
		}
		ch.procs[i] = p
		for _, port := range uniqueInts(in.port, in.entryPort) {
			if err := waitListening(p, port); err != nil {
				tail := p.logTail()
				ch.stopStarted()
				inUse := strings.Contains(strings.ToLower(tail), "address already in use")
				return nil, fmt.Errorf("relay %d of %d (%s %s): %v; log: %s",
					i+1, hops, filepath.Base(bin), strings.Join(args, " "), err, tail), inUse
			}
		}
		if i == 0 {
			ch.entry = addr(in.entryPort)
		}
	}
	return ch, nil, false
}

func (ch *chain) stopStarted() {
	for _, p := range ch.procs {
		if p != nil {
			p.stop()
		}
	}
}

func waitListening(p *proc, port int) error {
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("exited before listening on %d: %v", port, p.waitErr)
		default:
		}
		cn, err := net.DialTimeout("tcp", addr(port), 200*time.Millisecond)
		if err == nil {
			cn.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not listening on %d after %v", port, startTimeout)
}

func uniqueInts(a, b int) []int {
	if a == b {
		return []int{a}
	}
	return []int{a, b}
}
