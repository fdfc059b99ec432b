package wanemu

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Endpoint is one end of a link: a TUN device in a namespace with a
// point-to-point address.
type Endpoint struct {
	Netns  string
	Ifname string
	Addr   string // e.g. 10.200.0.1
}

// Link is a running emulated link between two endpoints.
type Link struct {
	a, b   Endpoint
	fdA    int
	fdB    int
	ab, ba *direction
	wg     sync.WaitGroup
}

// NewLink creates both TUNs, configures them (mtu 1500, txqueuelen 10000,
// point-to-point addresses, up) and starts forwarding. ab shapes packets
// sent by a toward b.
func NewLink(a, b Endpoint, ab, ba Params) (*Link, error) {
	l := &Link{a: a, b: b, fdA: -1, fdB: -1}
	var err error
	if l.fdA, err = openTUN(a.Netns, a.Ifname); err != nil {
		return nil, err
	}
	if l.fdB, err = openTUN(b.Netns, b.Ifname); err != nil {
		l.Close()
		return nil, err
	}
	for _, e := range []struct{ self, peer Endpoint }{{a, b}, {b, a}} {
		if err := configure(e.self, e.peer.Addr); err != nil {
			l.Close()
			return nil, err
		}
	}
	// Packets a's stack writes into its TUN are read from fdA and go to fdB.
	l.ab = newDirection(l.fdA, l.fdB, ab)
	l.ba = newDirection(l.fdB, l.fdA, ba)
	l.wg.Add(2)
	go l.ab.run(&l.wg)
	go l.ba.run(&l.wg)
	return l, nil
}

func configure(e Endpoint, peerAddr string) error {
	n := e.Netns
	if err := run("ip", "-n", n, "link", "set", e.Ifname, "mtu", "1500", "txqueuelen", "10000", "addrgenmode", "none"); err != nil {
		return err
	}
	if err := run("ip", "-n", n, "addr", "add", e.Addr+"/32", "peer", peerAddr+"/32", "dev", e.Ifname); err != nil {
		return err
	}
	return run("ip", "-n", n, "link", "set", e.Ifname, "up")
}

// SetParams changes one direction while running ("ab" or "ba").
func (l *Link) SetParams(dir string, p Params) error {
	switch dir {
	case "ab":
		l.ab.params.Store(&p)
	case "ba":
		l.ba.params.Store(&p)
	default:
		return fmt.Errorf("direction %q: want ab or ba", dir)
	}
	return nil
}

// Stats returns the statistics of both directions.
func (l *Link) Stats() (ab, ba Stats) { return l.ab.stats(), l.ba.stats() }

// Close stops forwarding and removes both TUNs.
func (l *Link) Close() error {
	if l.ab != nil {
		l.ab.stop.Store(true)
		l.ba.stop.Store(true)
		l.wg.Wait()
	}
	for _, fd := range []int{l.fdA, l.fdB} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	return nil
}
