// Package nexthop is the one list of hop schemes: the URL schemes a next
// hop may have (relayd's next:, --next, a lab topology's next_protocol) and,
// for each, how its client is built. Everything that needs to know the
// schemes asks here: Parse reads a next-hop URL, Build gives a hop its
// client, Lookup and Schemes answer what exists.
//
// Adding a hop protocol is one file plus one registration: write its client
// (a chain.HopDialer, or a chain.RouteHopDialer when one handshake can cross
// a run of its hops) in its own package, then add its entry to schemes
// below: its name and aliases, whether its URLs carry user:password, whether
// it needs the fleet secret, which relayd listener serves it, and New.
//
// The list lives here, not in pkg/chain, because the clients import pkg/chain.
package nexthop

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/httpconnect"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/socks5"
)

// Relaymesh is the native scheme: another relay's relay listener, spoken
// to in the route protocol (pkg/route, docs/protocol.md).
const Relaymesh = "relaymesh"

// schemes is the registry, in the order error messages list them.
var schemes = []Scheme{
	{
		// socks5h is the same thing: the hop always resolves names.
		Name: "socks5", Aliases: []string{"socks5h"}, UserInfo: true, Listener: "socks",
		New: func(h chain.Hop, _ Options) chain.HopDialer {
			return socks5.Client{User: h.User, Password: h.Password}
		},
	},
	{
		Name: "http", UserInfo: true, Listener: "http",
		New: func(h chain.Hop, _ Options) chain.HopDialer {
			return httpconnect.Client{User: h.User, Password: h.Password}
		},
	},
	{
		// Relays authenticate each other with the fleet secret, or with
		// identities from an operator's CA; ?name= names the relay.
		Name: Relaymesh, FleetSecret: true, Named: true, Listener: "relay",
		New: func(_ chain.Hop, o Options) chain.HopDialer {
			return route.Client{Secret: o.Secret}
		},
	},
}

// Scheme is one hop protocol.
type Scheme struct {
	// Name is the canonical scheme, lower case: what Hop.Scheme and
	// Hop.Name carry.
	Name string
	// Aliases are other URL schemes for the same protocol, lower case.
	Aliases []string
	// UserInfo: the scheme's URLs may carry user:password, which New finds
	// in Hop.User and Hop.Password. Without it a URL with any is refused.
	UserInfo bool
	// FleetSecret: the client authenticates with the fleet secret, which
	// Build then requires in Options.Secret, unless Options.LinkKeyed.
	FleetSecret bool
	// Named: the scheme's URLs may name the relay expected at the address
	// (?name=tokyo), which Parse puts in Hop.Relay.
	Named bool
	// Listener is the relayd listener that serves the protocol, by its
	// config key ("socks", "http", "relay"): where a relay is reached as a
	// hop of this scheme. "": relayd does not serve it.
	Listener string
	// New builds the hop's client. It must open nothing (the chain hands
	// the client a connection) and accept zero Options (Routes calls it
	// so); Build has already checked what the scheme needs.
	New func(h chain.Hop, o Options) chain.HopDialer
}

// Options is what a scheme may need to build its clients, beyond the hop.
type Options struct {
	Secret []byte // the fleet secret, for FleetSecret schemes
	// LinkKeyed: the fleet runs on identities from an operator's CA, and
	// route headers are keyed by their TLS link instead of a secret.
	LinkKeyed bool
}

// Routes reports whether the scheme's client is a chain.RouteHopDialer: one
// handshake crosses a run of its hops, and each hop follows the route it is
// sent, not its own next hops.
func (s Scheme) Routes() bool {
	_, ok := s.New(chain.Hop{Scheme: s.Name}, Options{}).(chain.RouteHopDialer)
	return ok
}

// Schemes lists the registered schemes, in order.
func Schemes() []Scheme { return append([]Scheme(nil), schemes...) }

// Lookup finds a scheme by name or alias, ignoring case.
func Lookup(name string) (Scheme, bool) {
	for _, s := range schemes {
		if strings.EqualFold(s.Name, name) {
			return s, true
		}
		for _, a := range s.Aliases {
			if strings.EqualFold(a, name) {
				return s, true
			}
		}
	}
	return Scheme{}, false
}

// want lists the schemes as URL prefixes: "socks5://, http:// or relaymesh://".
func want() string {
	var b strings.Builder
	for i, s := range schemes {
		switch {
		case i == 0:
		case i == len(schemes)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(s.Name + "://")
	}
	return b.String()
}

// RelayURL is the next-hop URL of the relay called name (may be empty) whose
// relay listener is at addr.
func RelayURL(name, addr string) string { return StripedRelayURL(name, addr, 1) }

// StripedRelayURL is RelayURL with the segment into the relay striped over
// stripes links (?stripes=; 1 or less: one connection).
func StripedRelayURL(name, addr string, stripes int) string {
	u := url.URL{Scheme: Relaymesh, Host: addr}
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	if stripes > 1 {
		q.Set("stripes", strconv.Itoa(stripes))
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Parse parses a next-hop URL, scheme://[user:pass@]host:port, of a
// registered scheme (relaymesh:// may end in ?name=RELAY, &stripes=N). The hop has no client yet: see Build. Errors name the
// URL without its password.
func Parse(raw string) (chain.Hop, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return chain.Hop{}, fmt.Errorf("next hop %q: %w", redact(raw), err)
	}
	s, ok := Lookup(u.Scheme)
	if !ok {
		return chain.Hop{}, fmt.Errorf("next hop %q: unsupported scheme %q (want %s)", redact(raw), u.Scheme, want())
	}
	if u.User != nil && !s.UserInfo {
		why := ""
		if s.FleetSecret {
			why = " (the fleet secret authenticates them)"
		}
		return chain.Hop{}, fmt.Errorf("next hop %q: %s:// hops take no user:password%s", redact(raw), s.Name, why)
	}
	if u.Path != "" && u.Path != "/" {
		return chain.Hop{}, fmt.Errorf("next hop %q: unexpected path %q (want scheme://[user:pass@]host:port)", redact(raw), u.Path)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return chain.Hop{}, fmt.Errorf("next hop %q: want scheme://[user:pass@]host:port", redact(raw))
	}
	h := chain.Hop{Scheme: s.Name, Addr: u.Host}
	if h.Relay, h.Stripes, err = relayQuery(s, u); err != nil {
		return chain.Hop{}, fmt.Errorf("next hop %q: %w", redact(raw), err)
	}
	if u.User != nil {
		h.User = u.User.Username()
		h.Password, _ = u.User.Password()
	}
	return h, nil
}

// ErrNoSecret: a FleetSecret scheme's hop was built without the secret.
var ErrNoSecret = errors.New("need the fleet secret")

// Build returns h with its client, built by h's scheme from o.
func Build(h chain.Hop, o Options) (chain.Hop, error) {
	s, ok := Lookup(h.Scheme)
	if !ok {
		return h, fmt.Errorf("unsupported scheme %q (want %s)", h.Scheme, want())
	}
	if s.FleetSecret && len(o.Secret) == 0 && !o.LinkKeyed {
		return h, fmt.Errorf("%s:// hops %w", s.Name, ErrNoSecret)
	}
	h.Scheme = s.Name
	h.Client = s.New(h, o)
	return h, nil
}

// relayQuery reads a relaymesh URL's query: ?name= the relay expected
// there ("" without one), ?stripes= the links the segment into it runs
// over (0 without one). Any other key is refused: a typo must not pass for
// a check that is not made.
func relayQuery(s Scheme, u *url.URL) (name string, stripes int, err error) {
	if u.RawQuery == "" {
		return "", 0, nil
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", 0, fmt.Errorf("query: %w", err)
	}
	if !s.Named {
		return "", 0, fmt.Errorf("%s:// hops take no query", s.Name)
	}
	for k, v := range q {
		if k != "name" && k != "stripes" {
			return "", 0, fmt.Errorf("unknown query parameter %q (want ?name=RELAY&stripes=N)", k)
		}
		if len(v) != 1 {
			return "", 0, fmt.Errorf("?%s= given more than once", k)
		}
	}
	if q.Has("name") {
		if err := linktls.CheckName(q.Get("name")); err != nil {
			return "", 0, fmt.Errorf("?name=: %w", err)
		}
	}
	if q.Has("stripes") {
		n, err := strconv.Atoi(q.Get("stripes"))
		if err != nil || n < 1 || n > route.MaxStripes {
			return "", 0, fmt.Errorf("?stripes=%s: want the links of the segment into this relay, 1 to %d", q.Get("stripes"), route.MaxStripes)
		}
		stripes = n
	}
	return q.Get("name"), stripes, nil
}

// redact removes the password from a URL-ish string for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
