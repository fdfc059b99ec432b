package chain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/stripe"
)

// stripeFirst reaches the chain's first hop over Hops[0].Stripes links:
// link0 (already dialed and secured) and the others dialed at once, in
// parallel. They are new connections, not warm ones: a pooled link that
// died unseen would hold the relay's request until its handshake timeout,
// while a new one fails at its dial. On success the returned conn is the
// striped stream, with no deadline left on any link; on failure every
// link is closed, link0 included. The stream is made on res (the
// reservation of its reorder memory, DialEarly's), which it releases when
// closed.
func (c *Chain) stripeFirst(ctx context.Context, link0 net.Conn, via []Hop, target string, res *stripe.Reservation) (net.Conn, error) {
	first := c.Hops[0]
	sd, ok := first.Client.(StripedRouteHopDialer)
	if !ok {
		return link0, fmt.Errorf("hop %s cannot be striped", first.Name())
	}
	extra, err := c.dialLinks(ctx, first, first.Stripes-1)
	if err != nil {
		return link0, err
	}
	links := append([]net.Conn{link0}, extra...)
	closeAll := func() {
		for _, l := range extra { // link0 is the caller's to close
			l.Close()
		}
	}
	stop := context.AfterFunc(ctx, func() {
		for _, l := range links {
			_ = l.SetDeadline(time.Unix(1, 0))
		}
	})
	err = sd.ThroughStriped(ctx, links, via, target)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		closeAll()
		return link0, err
	}
	for _, l := range links {
		_ = l.SetDeadline(time.Time{})
	}
	s, err := stripe.NewReserved(links, res)
	if err != nil { // cannot happen: 2 ≤ Stripes ≤ MaxLinks was checked
		closeAll()
		return link0, err
	}
	return s, nil
}

// dialLinks dials n more links to hop in parallel, each secured (Link) and
// under ctx's deadline. On failure none is left open.
func (c *Chain) dialLinks(ctx context.Context, hop Hop, n int) ([]net.Conn, error) {
	links := make([]net.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range links {
		wg.Go(func() { links[i], errs[i] = c.dialLink(ctx, hop) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, l := range links {
			if l != nil {
				l.Close()
			}
		}
		return nil, fmt.Errorf("%d more links to %s: %w", n, hop.Name(), err)
	}
	return links, nil
}

// dialLink is one more link to hop: dialed, then secured (Link).
func (c *Chain) dialLink(ctx context.Context, hop Hop) (net.Conn, error) {
	conn, err := c.Base.DialContext(ctx, "tcp", hop.Addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if c.Link == nil {
		return conn, nil
	}
	return c.Link(ctx, conn, hop) // on failure it closed conn
}
