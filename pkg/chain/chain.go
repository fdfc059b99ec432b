// Package chain builds a path to a destination out of hops. A hop is a Dialer;
// a chain is a Dialer wrapping a Dialer, so callers never need to know how many
// hops there are. Every error a chain returns is a *HopError (or wraps one) that
// says which hop failed and how, so front ends can map it to a protocol reply.
// The hop schemes and their clients are listed once, in pkg/nexthop.
package chain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/relaymesh/relaymesh/pkg/stripe"
)

// Dialer is the one contract every hop and chain implements. The returned conn
// is owned by the caller. Implementations that tunnel over TCP return the
// underlying *net.TCPConn once the handshake is done, so io.Copy can splice.
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Kind classifies why a dial failed; front ends map it to SOCKS5 / HTTP codes.
type Kind int

const (
	KindGeneral         Kind = iota // anything else (protocol error, EOF, ...)
	KindDenied                      // a policy refused the destination (ours or a hop's)
	KindNetUnreachable              // ENETUNREACH
	KindHostUnreachable             // EHOSTUNREACH, DNS failure
	KindRefused                     // ECONNREFUSED
	KindTimeout                     // deadline exceeded
	KindAuth                        // a hop rejected our credentials
)

func (k Kind) String() string {
	switch k {
	case KindDenied:
		return "denied"
	case KindNetUnreachable:
		return "network unreachable"
	case KindHostUnreachable:
		return "host unreachable"
	case KindRefused:
		return "connection refused"
	case KindTimeout:
		return "timeout"
	case KindAuth:
		return "authentication failed"
	default:
		return "general failure"
	}
}

// Label is a short metric-safe form of the kind.
func (k Kind) Label() string {
	switch k {
	case KindDenied:
		return "denied"
	case KindNetUnreachable:
		return "net_unreachable"
	case KindHostUnreachable:
		return "host_unreachable"
	case KindRefused:
		return "refused"
	case KindTimeout:
		return "timeout"
	case KindAuth:
		return "auth"
	default:
		return "general"
	}
}

// HopError says which hop of a chain failed while reaching Target.
// Hop is 1-based; Hop 0 is this relay dialing directly (no next hop involved).
type HopError struct {
	Hop     int
	HopName string // e.g. "socks5://127.0.0.1:1081", never with credentials
	Target  string // what the hop was asked to reach (next hop or destination)
	Kind    Kind
	Err     error
}

func (e *HopError) Error() string {
	if e.Hop == 0 {
		return fmt.Sprintf("dial %s: %s: %v", e.Target, e.Kind, e.Err)
	}
	return fmt.Sprintf("hop %d (%s) reaching %s: %s: %v", e.Hop, e.HopName, e.Target, e.Kind, e.Err)
}

func (e *HopError) Unwrap() error { return e.Err }

// DeniedError is returned by policies (see pkg/policy) when a destination is
// refused. Hop dialers also return it (wrapped) when a hop answered "not allowed".
type DeniedError struct {
	Addr   string
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("destination %s denied: %s", e.Addr, e.Reason)
}

// RemoteError is a failure a hop reported in its protocol (a SOCKS5 reply
// code, an HTTP status), already mapped to a Kind by the hop client.
type RemoteError struct {
	Kind Kind
	Msg  string
}

func (e *RemoteError) Error() string { return e.Msg }

// HopAuthError means a hop refused our credentials (or wanted some).
type HopAuthError struct {
	Msg string
	Err error // the underlying error, if any (e.g. io.EOF for a silent close)
}

func (e *HopAuthError) Error() string { return e.Msg }
func (e *HopAuthError) Unwrap() error { return e.Err }

// Classify maps an error to a Kind: the Kind of the *HopError or
// *RemoteError it wraps, or a classification of the raw network error.
func Classify(err error) Kind {
	if err == nil {
		return KindGeneral
	}
	var de *DeniedError
	if errors.As(err, &de) {
		return KindDenied
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Kind
	}
	var ae *HopAuthError
	if errors.As(err, &ae) {
		return KindAuth
	}
	var he *HopError
	if errors.As(err, &he) {
		return he.Kind
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return KindNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EHOSTDOWN):
		return KindHostUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return KindTimeout
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsTimeout {
			return KindTimeout
		}
		return KindHostUnreachable
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return KindTimeout
	}
	return KindGeneral
}

// Hop is one next hop, such as socks5://user:pass@host:port or
// http://host:port. pkg/nexthop, the list of hop schemes, parses hop URLs
// and builds Client.
type Hop struct {
	Scheme string // canonical scheme name, e.g. "socks5" (pkg/nexthop)
	Addr   string // host:port
	// Relay is the name of the relaymesh relay expected at Addr, when
	// known: Link checks the peer's certificate names it before anything
	// is sent, and a route header carries it to the relay before.
	Relay    string
	User     string
	Password string
	// Stripes is how many links the segment into this relaymesh hop runs
	// over (pkg/stripe); 0 or 1: one connection, as any other hop. Only
	// a segment between two relays, or from a chain to its first hop,
	// can be striped.
	Stripes int
	// Client speaks the hop's protocol. A Chain fails a dial through a
	// hop that has none.
	Client HopDialer
}

// Name is the hop's URL without credentials, safe to log.
func (h Hop) Name() string { return h.Scheme + "://" + h.Addr }

// Routed reports whether the hop is a relay taking a route header: its
// Client is a RouteHopDialer. Such a hop's connection goes through
// Chain.Link and may come from Chain.Warm.
func (h Hop) Routed() bool {
	_, ok := h.Client.(RouteHopDialer)
	return ok
}

// HopDialer opens a tunnel through a proxy reached over a connection: the
// client of one hop scheme (pkg/nexthop lists them and their clients).
type HopDialer interface {
	// Through asks the proxy, reached over conn, to connect to addr. On success
	// conn carries the tunnel. It must honour ctx's deadline.
	Through(ctx context.Context, conn net.Conn, addr string) error
}

// RouteHopDialer is a HopDialer that reaches a run of consecutive hops of its
// scheme in ONE handshake: it asks the hop reached over conn to pass through
// via (the run's other hops, in order) and connect to addr. Chain uses it for
// relaymesh:// hops instead of nesting one handshake per hop.
type RouteHopDialer interface {
	HopDialer
	//
	// early, when not empty, is sent right behind the handshake without
	// waiting for the answer (the last relay hands it to addr as soon as it
	// has connected); the caller only passes it for the chain's last run.
	ThroughRoute(ctx context.Context, conn net.Conn, via []Hop, addr string, early []byte) error
}

// StripedRouteHopDialer is a RouteHopDialer that can also reach its first
// hop over several links at once (Hop.Stripes): the handshake on
// links[0], the others joined to it. It sends no early data.
type StripedRouteHopDialer interface {
	RouteHopDialer
	ThroughStriped(ctx context.Context, links []net.Conn, via []Hop, addr string) error
}

// Warm hands out pre-established connections (pkg/pool). Take returns nil
// when it has none for addr.
type Warm interface {
	Take(addr string) net.Conn
}

// RouteError wraps a RouteHopDialer's failure with the hop of the run that
// reported it: Offset 0 is the hop reached over conn, 1 the next, ...
type RouteError struct {
	Offset int
	Err    error
}

func (e *RouteError) Error() string { return e.Err.Error() }
func (e *RouteError) Unwrap() error { return e.Err }

// Chain dials through a list of hops in order. The first hop is reached with
// Base (no destination policy: hops are operator-configured), the final
// destination is reached through the last hop. With no hops, Direct is used.
type Chain struct {
	Hops   []Hop  // each with its Client
	Base   Dialer // dials the first hop
	Direct Dialer // dials the destination when there are no hops
	// Warm, when set, supplies the connection to a relaymesh:// first hop
	// (Hop.Routed) without a TCP handshake (and, with Link, already secured); a miss
	// falls back to Base.
	Warm Warm
	// Link, when set, secures the connection to a relay before its route
	// handshake (pkg/linktls: TLS with the fleet's certificates), at the
	// start of every run of relaymesh:// (Routed) hops; hop is the relay
	// (its Relay, when set, is the name its certificate must carry). A
	// conn from Warm is already secured: Link then only checks whom it
	// reaches. It owns conn (closes it on failure). Nil: relay links are
	// plain.
	Link func(ctx context.Context, conn net.Conn, hop Hop) (net.Conn, error)

	// Observe, when set, is told how long each step took: hop 0 is a direct
	// dial, hop i >= 1 is connecting to hop 1 (i == 1) plus hop i's handshake.
	Observe func(hop int, name string, d time.Duration, err error)

	// StripeBudget, when set, is what a striped first hop's stream
	// (Hop.Stripes) reserves its reorder memory from, before any link is
	// dialed: a dial it cannot cover fails at once, as this end's own
	// failure (HopError hop 0, errors.Is stripe.ErrBudget). Nil: no bound.
	StripeBudget *stripe.Budget
}

func (c *Chain) observe(hop int, name string, start time.Time, err error) {
	if c.Observe != nil {
		c.Observe(hop, name, time.Since(start), err)
	}
}

// DialContext implements Dialer.
func (c *Chain) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return c.DialEarly(ctx, addr, nil)
}

// DialEarly reaches addr like DialContext and delivers early, the first bytes
// of the tunnel, on the way: behind the route header when the chain ends in a
// run of relaymesh:// hops (they reach addr without waiting for the status,
// saving a chain round trip), otherwise written once the chain is up. On
// success every byte of early has been written.
func (c *Chain) DialEarly(ctx context.Context, addr string, early []byte) (net.Conn, error) {
	start := time.Now()
	if len(c.Hops) == 0 {
		conn, err := c.Direct.DialContext(ctx, "tcp", addr)
		c.observe(0, "direct", start, err)
		if err == nil && len(early) > 0 {
			if _, err = conn.Write(early); err != nil {
				conn.Close()
			}
		}
		if err != nil {
			return nil, &HopError{Hop: 0, Target: addr, Kind: Classify(err), Err: err}
		}
		return conn, nil
	}
	var res *stripe.Reservation
	if c.Hops[0].Stripes > 1 {
		var err error
		if res, err = c.StripeBudget.Reserve(c.Hops[0].Stripes, 0); err != nil {
			// This end's own memory: nothing was sent, no hop is to blame.
			return nil, &HopError{Hop: 0, Target: c.Hops[0].Addr, Kind: KindGeneral, Err: err}
		}
	}
	conn, err := c.dialHops(ctx, addr, early, start, res)
	if err != nil {
		// A stream made on res released it when it was closed; else it
		// is still ours (a no-op for a nil res).
		res.Release()
	}
	return conn, err
}

// dialHops is DialEarly through at least one hop; res is the striped first
// hop's reservation (nil when it is not striped), which a stream made on
// it takes.
func (c *Chain) dialHops(ctx context.Context, addr string, early []byte, start time.Time, res *stripe.Reservation) (net.Conn, error) {
	first := c.Hops[0]
	var conn net.Conn
	if c.Warm != nil && first.Routed() {
		conn = c.Warm.Take(first.Addr)
	}
	if conn != nil {
		pooledStart := start
		out, err := c.handshake(ctx, conn, addr, early, start, res)
		// A warm conn the peer closed a moment before we used it (its
		// header wait ran out, it restarted) fails before any answer;
		// the peer read nothing, so one cold retry is safe. Not with
		// early data: a peer that crashed after reading could have
		// passed it on already. A striped first hop sends early data
		// only once the stream is up, so its failure sent none.
		sentEarly := len(early) > 0 && first.Stripes <= 1
		if err == nil || sentEarly || !closedSilently(err) {
			return out, err
		}
		start = pooledStart
	}
	conn, err := c.Base.DialContext(ctx, "tcp", first.Addr)
	if err != nil {
		c.observe(1, first.Name(), start, err)
		// We could not reach hop 1 ourselves: the failure is hop 1's.
		return nil, &HopError{Hop: 1, HopName: first.Name(), Target: first.Addr, Kind: Classify(err), Err: fmt.Errorf("connect to hop: %w", err)}
	}
	return c.handshake(ctx, conn, addr, early, start, res)
}

// closedSilently: the hop closed or reset the connection without a word.
func closedSilently(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// handshake runs every hop's handshake over conn, connected to hop 1, and
// returns the tunnel to addr. It owns conn: closed on failure.
func (c *Chain) handshake(ctx context.Context, conn net.Conn, addr string, early []byte, start time.Time, res *stripe.Reservation) (net.Conn, error) {
	var err error
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// A cancelled ctx (shutdown, client gone) interrupts a handshake in flight.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	for i := 0; i < len(c.Hops); {
		// A run of relaymesh:// hops is one handshake with the first of them
		// (the header names the rest); any other hop is a run of one.
		j := i + 1
		rd, isRoute := c.Hops[i].Client.(RouteHopDialer)
		for isRoute && j < len(c.Hops) && c.Hops[j].Scheme == c.Hops[i].Scheme {
			j++
		}
		target := addr
		if j < len(c.Hops) {
			target = c.Hops[j].Addr
		}
		if c.Hops[i].Client == nil {
			// Not a panic in a connection goroutine: a failed dial.
			err = fmt.Errorf("hop %s has no client", c.Hops[i].Name())
		} else if isRoute {
			via := c.Hops[i+1 : j]
			var runEarly []byte
			if j == len(c.Hops) {
				runEarly, early = early, nil
			}
			if c.Link != nil {
				// On failure Link closed conn; the Close below is a no-op.
				var sec net.Conn
				if sec, err = c.Link(ctx, conn, c.Hops[i]); err == nil {
					conn = sec
				}
			}
			switch {
			case err != nil:
			case i == 0 && c.Hops[0].Stripes > 1:
				conn, err = c.stripeFirst(ctx, conn, via, target, res)
				if j == len(c.Hops) {
					// The striped stream carries the early bytes
					// once up (written below).
					early = runEarly
				}
			default:
				err = rd.ThroughRoute(ctx, conn, via, target, runEarly)
			}
		} else {
			err = c.Hops[i].Client.Through(ctx, conn, target)
		}
		c.observe(i+1, c.Hops[i].Name(), start, err)
		start = time.Now()
		if err != nil {
			stop()
			conn.Close()
			k := Classify(err)
			if ctx.Err() != nil {
				k = KindTimeout
				err = fmt.Errorf("%w (%v)", err, ctx.Err())
			}
			var re *RouteError
			if errors.As(err, &re) {
				// The run's relays already said whom the failure belongs
				// to (the relay that could not reach its next step, or
				// the next relay when that one is down): name it as is.
				r := i + min(max(re.Offset, 0), j-i-1)
				if r+1 < len(c.Hops) {
					target = c.Hops[r+1].Addr
				}
				return nil, &HopError{Hop: r + 1, HopName: c.Hops[r].Name(), Target: target, Kind: k, Err: err}
			}
			if i+1 < j {
				target = c.Hops[i+1].Addr
			}
			h := c.Hops[i]
			he := &HopError{Hop: i + 1, HopName: h.Name(), Target: target, Kind: k, Err: err}
			if i+1 < len(c.Hops) && (k == KindRefused || k == KindHostUnreachable || k == KindNetUnreachable || k == KindTimeout) {
				// Hop i+1 could not reach hop i+2: the one that is down (or
				// cut off) is hop i+2, so name it.
				next := c.Hops[i+1]
				he = &HopError{Hop: i + 2, HopName: next.Name(), Target: next.Addr, Kind: k,
					Err: fmt.Errorf("unreachable from hop %d: %w", i+1, err)}
			}
			return nil, he
		}
		i = j
	}
	last := c.Hops[len(c.Hops)-1]
	if len(early) > 0 {
		if _, err := conn.Write(early); err != nil {
			stop()
			conn.Close()
			return nil, &HopError{Hop: len(c.Hops), HopName: last.Name(), Target: addr, Kind: Classify(err), Err: fmt.Errorf("send first bytes: %w", err)}
		}
	}
	if !stop() {
		conn.Close()
		return nil, &HopError{Hop: len(c.Hops), HopName: last.Name(), Target: addr, Kind: KindTimeout, Err: ctx.Err()}
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// Names lists the hops' safe names in order.
func (c *Chain) Names() []string {
	out := make([]string, len(c.Hops))
	for i, h := range c.Hops {
		out[i] = h.Name()
	}
	return out
}

// ParseKindLabel is the inverse of Kind.Label.
func ParseKindLabel(s string) (Kind, bool) {
	for k := KindGeneral; k <= KindAuth; k++ {
		if k.Label() == s {
			return k, true
		}
	}
	return KindGeneral, false
}
