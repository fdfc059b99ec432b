package route

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/linktls"
)

// Client speaks the route protocol over a conn someone else dialed (it opens
// no sockets). It is the chain.RouteHopDialer for relaymesh:// hops. It reads
// exactly the response's bytes, so after success the conn is the raw tunnel
// and stays a *net.TCPConn if it was one.
type Client struct {
	// Secret is the fleet secret; nil in a fleet of per-relay identities,
	// whose headers are keyed by the TLS link (LinkKey).
	Secret []byte
	// UDP makes the header open a UDP association (Request.UDP) instead
	// of a tunnel to the address it is given: after the status the conn
	// carries datagram frames (datagram.go).
	UDP bool
	Now func() time.Time // for tests; nil is time.Now
}

// Through implements chain.HopDialer: the hop reached over conn is the last relay.
func (c Client) Through(ctx context.Context, conn net.Conn, addr string) error {
	return c.ThroughRoute(ctx, conn, nil, addr, nil)
}

// ThroughRoute sends one header naming via and addr, with early right behind
// it in the same write (the relays pass it on before the status returns),
// and waits for the status. via's relay names travel with their addresses
// when every hop has one (each relay checks its next hop's certificate
// against it). A failure is a *chain.RouteError whose Offset names the
// relay that reported it (0: the one reached over conn).
func (c Client) ThroughRoute(ctx context.Context, conn net.Conn, via []chain.Hop, addr string, early []byte) error {
	return c.through(ctx, []net.Conn{conn}, via, addr, early)
}

// ThroughStriped is ThroughRoute over a segment striped across links, all
// open to the same relay: the header goes on links[0], a Join on each of
// the others, and the status comes back on links[0]. It sends no early
// data: bytes behind the header would ride outside the stripes' framing,
// so the caller writes them into the striped stream once it is up.
func (c Client) ThroughStriped(ctx context.Context, links []net.Conn, via []chain.Hop, addr string) error {
	if len(links) < 2 || len(links) > MaxStripes {
		return fmt.Errorf("route: a striped segment of %d links (2 to %d)", len(links), MaxStripes)
	}
	return c.through(ctx, links, via, addr, nil)
}

// through sends the header (and early behind it) on links[0], a join on
// each other link, and reads the status on links[0].
func (c Client) through(ctx context.Context, links []net.Conn, via []chain.Hop, addr string, early []byte) error {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	conn := links[0]
	if c.UDP {
		addr = ""
	}
	req, err := NewRequest(nil, addr, now())
	if err != nil {
		return err
	}
	req.Hops, req.Names, req.Stripes = hopsOf(via)
	req.UDP, req.InStripes = c.UDP, len(links)
	if req.Bind, err = linktls.Binding(conn); err != nil {
		return err
	}
	key := LinkKey(c.Secret, req.Bind)
	hdr, err := req.Marshal(key)
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	if len(early) > 0 {
		hdr = append(hdr, early...)
	}
	if _, err := conn.Write(hdr); err != nil {
		return fmt.Errorf("route: send header: %w", err)
	}
	for i, l := range links[1:] {
		if err := c.join(l, req.Nonce, i+1, len(links), now()); err != nil {
			return err
		}
	}
	resp, err := ReadResponse(conn, key, req.Nonce)
	if err != nil {
		if errors.Is(err, ErrAuth) {
			return &chain.HopAuthError{Msg: "route: response MAC does not verify: the relay has a different fleet secret"}
		}
		if ctx.Err() == nil && (errors.Is(err, net.ErrClosed) || isEOF(err)) {
			// A relay closes without a word on a header it cannot verify.
			return &chain.HopAuthError{Msg: "route: relay closed without a status: wrong fleet secret, clock skew beyond the replay window, or not a relay listener", Err: err}
		}
		return fmt.Errorf("route: read status: %w", err)
	}
	if resp.Status == StatusOK {
		return nil
	}
	return &chain.RouteError{Offset: int(resp.Hop), Err: &StatusError{Status: resp.Status, Reason: resp.Reason}}
}

// join sends link index's Join to the request with nonce group.
func (c Client) join(l net.Conn, group [NonceBytes]byte, index, count int, now time.Time) error {
	j, err := NewJoin(group, index, count, now)
	if err != nil {
		return err
	}
	if j.Bind, err = linktls.Binding(l); err != nil {
		return err
	}
	msg, err := j.Marshal(LinkKey(c.Secret, j.Bind))
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	if _, err := l.Write(msg); err != nil {
		return fmt.Errorf("route: send join on link %d of %d: %w", index+1, count, err)
	}
	return nil
}

// hopsOf splits via into addresses, when every hop names its relay the
// names (nil otherwise: a Version header), and when a segment is striped
// the links into each hop (nil otherwise).
func hopsOf(via []chain.Hop) (addrs, names []string, stripes []int) {
	addrs = make([]string, len(via))
	named := len(via) > 0
	for i, h := range via {
		addrs[i] = h.Addr
		named = named && h.Relay != ""
		if h.Stripes > 1 && stripes == nil {
			stripes = make([]int, len(via))
		}
	}
	for i, h := range via {
		if stripes != nil {
			stripes[i] = h.Stripes
		}
	}
	if named {
		names = make([]string, len(via))
		for i, h := range via {
			names[i] = h.Relay
		}
	}
	return addrs, names, stripes
}

// StatusError is a failure status a relay sent back. It unwraps to a
// *chain.RemoteError so chain.Classify maps it to the matching Kind.
type StatusError struct {
	Status Status
	Reason string // as the reporting relay wrote it
}

func (e *StatusError) Error() string {
	if e.Reason == "" {
		return "route status: " + e.Status.String()
	}
	return "route status: " + e.Status.String() + ": " + e.Reason
}

func (e *StatusError) Unwrap() error {
	return &chain.RemoteError{Kind: KindOf(e.Status), Msg: e.Error()}
}

// KindOf maps a failure status to a chain.Kind.
func KindOf(s Status) chain.Kind {
	switch s {
	case StatusDenied:
		return chain.KindDenied
	case StatusNetUnreachable:
		return chain.KindNetUnreachable
	case StatusHostUnreachable:
		return chain.KindHostUnreachable
	case StatusRefused:
		return chain.KindRefused
	case StatusTimeout:
		return chain.KindTimeout
	case StatusAuthFailed:
		return chain.KindAuth
	}
	return chain.KindGeneral
}

// StatusOf maps a chain.Kind to the status a relay reports.
func StatusOf(k chain.Kind) Status {
	switch k {
	case chain.KindDenied:
		return StatusDenied
	case chain.KindNetUnreachable:
		return StatusNetUnreachable
	case chain.KindHostUnreachable:
		return StatusHostUnreachable
	case chain.KindRefused:
		return StatusRefused
	case chain.KindTimeout:
		return StatusTimeout
	case chain.KindAuth:
		return StatusAuthFailed
	}
	return StatusGeneral
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
