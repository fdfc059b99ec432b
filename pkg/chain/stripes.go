package chain

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/relaymesh/relaymesh/pkg/stripe"
)

// stripeFirst reaches the chain's first hop over Hops[0].Stripes links:
// link0 (already dialed and secured), and the others taken from the warm
// pool or dialed as link0 was. On success the returned conn is the striped
// stream, with no deadline left on any link; on failure every link is
// closed, link0 included.
func (c *Chain) stripeFirst(ctx context.Context, link0 net.Conn, via []Hop, target string) (net.Conn, error) {
	first := c.Hops[0]
	sd, ok := first.Client.(StripedRouteHopDialer)
	if !ok {
		return link0, fmt.Errorf("hop %s cannot be striped", first.Name())
	}
	links := []net.Conn{link0}
	closeAll := func() {
		for _, l := range links[1:] { // link0 is the caller's to close
			l.Close()
		}
	}
	for len(links) < first.Stripes {
		l, err := c.dialLink(ctx, first)
		if err != nil {
			closeAll()
			return link0, fmt.Errorf("link %d of %d: %w", len(links)+1, first.Stripes, err)
		}
		links = append(links, l)
	}
	stop := context.AfterFunc(ctx, func() {
		for _, l := range links {
			_ = l.SetDeadline(time.Unix(1, 0))
		}
	})
	err := sd.ThroughStriped(ctx, links, via, target)
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
	s, err := stripe.New(links, 0)
	if err != nil { // cannot happen: 2 ≤ Stripes ≤ MaxLinks was checked
		closeAll()
		return link0, err
	}
	return s, nil
}

// dialLink is one more link to hop, as the chain reaches its first hop: a
// warm one when the pool has it, else dialed, then secured (Link).
func (c *Chain) dialLink(ctx context.Context, hop Hop) (net.Conn, error) {
	var conn net.Conn
	if c.Warm != nil {
		conn = c.Warm.Take(hop.Addr)
	}
	if conn == nil {
		var err error
		if conn, err = c.Base.DialContext(ctx, "tcp", hop.Addr); err != nil {
			return nil, err
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if c.Link == nil {
		return conn, nil
	}
	return c.Link(ctx, conn, hop) // on failure it closed conn
}
