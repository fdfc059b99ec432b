package udpask

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
)

// readBufferBytes is the receive buffer a Client asks for: a thousand
// answers as the kernel counts them (about 1 KB each, headers included).
const readBufferBytes = 1 << 20

// Client asks relays over one UDP socket, for as many asks at once as its
// caller makes. Close it when done.
type Client struct {
	key  Key
	conn *net.UDPConn
	now  func() time.Time

	mu      sync.Mutex
	waiting map[Nonce]*call
	err     error // the socket's, once its reader stopped
}

// call is one datagram's ask in flight.
type call struct {
	nonce   Nonce
	first   int // the index of its first target among the ask's
	sent    time.Time
	acked   chan struct{} // closed at its acknowledgement (or its reply)
	ackedAt time.Time     // set before acked is closed
	replied chan Reply    // its reply, once
	ackOnce sync.Once
}

// ack marks the call acknowledged at now.
func (cl *call) ack(now time.Time) {
	cl.ackOnce.Do(func() {
		cl.ackedAt = now
		close(cl.acked)
	})
}

// NewClient opens a UDP socket (any local port, both address families)
// whose asks and replies are authenticated with key.
func NewClient(key Key) (*Client, error) {
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, err
	}
	// A plan's round asks hundreds of relays, whose acknowledgements and
	// replies may arrive together: room for them while the reader
	// catches up (the kernel caps it at net.core.rmem_max).
	_ = conn.SetReadBuffer(readBufferBytes)
	c := &Client{key: key, conn: conn, now: time.Now, waiting: map[Nonce]*call{}}
	go c.read()
	return c, nil
}

// Close closes the socket; asks in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) read() {
	buf := make([]byte, MaxDatagram+1)
	for {
		n, _, err := c.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
				return
			}
			continue // an ICMP error for one ask (port unreachable): others go on
		}
		b := buf[:n]
		if nonce, err := c.key.OpenAck(b); err == nil {
			c.mu.Lock()
			cl := c.waiting[nonce]
			c.mu.Unlock()
			if cl != nil {
				cl.ack(c.now())
			}
			continue
		}
		if r, err := c.key.OpenReply(b); err == nil {
			c.mu.Lock()
			cl := c.waiting[r.Nonce]
			delete(c.waiting, r.Nonce)
			c.mu.Unlock()
			if cl != nil {
				cl.ack(c.now())
				cl.replied <- r
			}
		}
	}
}

// Pending is an ask in flight: its targets split over as many datagrams as
// they need.
type Pending struct {
	c       *Client
	calls   []*call // in the targets' order
	targets int
	acked   chan struct{} // closed once every datagram is acknowledged
	done    chan struct{} // closed by Cancel
	once    sync.Once
}

// Ask sends the relay named relay, at addr (its admin host:port; its UDP
// port is the same number), an ask for handshakes timed to each of
// targets, each bounded by timeout, and with withInfo for the relay's
// windows (then targets may be none). The relay answers only an ask that
// names it (its registry name). Wait for its answer or Cancel it.
func (c *Client) Ask(ctx context.Context, relay, addr string, handshakes int, timeout time.Duration, targets []string, withInfo bool) (*Pending, error) {
	ua, err := net.DefaultResolver.LookupNetIP(ctx, "ip", hostOf(addr))
	if err != nil {
		return nil, err
	}
	if len(ua) == 0 {
		return nil, fmt.Errorf("udpask: %s: no address", addr)
	}
	_, port, _ := net.SplitHostPort(addr)
	to, err := net.ResolveUDPAddr("udp", net.JoinHostPort(ua[0].Unmap().String(), port))
	if err != nil {
		return nil, err
	}
	p := &Pending{c: c, targets: len(targets), acked: make(chan struct{}), done: make(chan struct{})}
	// Greedy split: as many targets a datagram as fit; the first asks
	// for the windows.
	for start := 0; start < len(targets) || len(p.calls) == 0; {
		var flags byte
		if withInfo && start == 0 {
			flags = FlagInfo
		}
		end := min(start+1, len(targets))
		for end < len(targets) && end-start < 255 && AskSize(relay, targets[start:end+1], flags) <= MaxDatagram {
			end++
		}
		var n Nonce
		_, _ = rand.Read(n[:])
		b, err := c.key.SealAsk(Ask{Relay: relay, Nonce: n, At: c.now(), Handshakes: handshakes, Flags: flags,
			TimeoutMs: max(1, min(int(timeout.Milliseconds()), 65535)), Targets: targets[start:end]})
		if err != nil {
			p.Cancel()
			return nil, err
		}
		cl := &call{nonce: n, first: start, sent: c.now(), acked: make(chan struct{}), replied: make(chan Reply, 1)}
		c.mu.Lock()
		if c.err != nil {
			c.mu.Unlock()
			p.Cancel()
			return nil, c.err
		}
		c.waiting[n] = cl
		c.mu.Unlock()
		p.calls = append(p.calls, cl)
		if _, err := c.conn.WriteToUDP(b, to); err != nil {
			p.Cancel()
			return nil, err
		}
		start = end
	}
	go func() {
		for _, cl := range p.calls {
			select {
			case <-cl.acked:
			case <-p.done:
				return
			}
		}
		close(p.acked)
	}()
	return p, nil
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// Acked is closed once the relay has acknowledged every datagram of the
// ask: asks reach it, and its replies reach here.
func (p *Pending) Acked() <-chan struct{} { return p.acked }

// AckRTT is how long the first datagram's acknowledgement took: the round
// trip to the relay (and its reading the ask). Call it once Acked is
// closed.
func (p *Pending) AckRTT() time.Duration { return p.calls[0].ackedAt.Sub(p.calls[0].sent) }

// Wait waits for the replies (or ctx's end) and returns each target's
// median RTT, negative for one the relay could not measure, what the relay
// learnt of each target's sends to it, and the relay's windows when asked
// for (nil from a reply without them).
func (p *Pending) Wait(ctx context.Context) ([]time.Duration, []Learnt, *adminapi.Info, error) {
	defer p.Cancel()
	out := make([]time.Duration, p.targets)
	recv := make([]Learnt, p.targets)
	var info *adminapi.Info
	for i, cl := range p.calls {
		end := p.targets
		if i+1 < len(p.calls) {
			end = p.calls[i+1].first
		}
		select {
		case r := <-cl.replied:
			if len(r.RTTs) != end-cl.first {
				return nil, nil, nil, errors.New("udpask: a reply for another number of targets")
			}
			copy(out[cl.first:end], r.RTTs)
			copy(recv[cl.first:end], r.Recv)
			if r.Info != nil {
				info = r.Info
			}
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		}
	}
	return out, recv, info, nil
}

// Cancel forgets the ask: a reply after it is dropped. Wait calls it.
func (p *Pending) Cancel() {
	p.once.Do(func() { close(p.done) })
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	for _, cl := range p.calls {
		delete(p.c.waiting, cl.nonce)
	}
}
