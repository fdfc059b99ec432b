// Package policy decides which destination IPs a relay may connect to. It is
// deny-by-default for the ranges an attacker asks an open proxy for first
// (loopback, private, link-local incl. cloud metadata, CGNAT, unspecified,
// multicast, reserved), checked on the resolved IP at connect time so a
// hostname that resolves to 127.0.0.1 (or re-binds to it) is refused too.
package policy

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"

	"github.com/relaymesh/relaymesh/pkg/chain"
)

// Range is a denied prefix with the reason reported in logs and metrics.
type Range struct {
	Prefix netip.Prefix
	Reason string
}

// DefaultDeny is the built-in deny list (docs/reliability.md case 5).
// IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are unmapped before matching,
// so they hit the IPv4 ranges.
var DefaultDeny = []Range{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("192.0.0.0/24"), "ietf-protocol"}, // 192.0.0.192: a cloud metadata address
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "ipv4-compatible"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	// IPv6 prefixes that carry an IPv4 address a gateway translates to:
	// through them a relay reaches any IPv4 range above, metadata included.
	{netip.MustParsePrefix("64:ff9b::/96"), "nat64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "nat64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2001::/32"), "teredo"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	// The rest of the IANA special-purpose registries: nothing a client
	// has business reaching through a public relay, and some (site-local,
	// SIIT's IPv4-translated addresses, the 6to4 relay anycast) route to
	// the relay's own network or to a translator behind it.
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "ipv4-translated"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4"},
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking"},
	{netip.MustParsePrefix("2001:10::/28"), "orchid"},
	{netip.MustParsePrefix("2001:20::/28"), "orchid"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
}

// Policy is the destination rule set. The zero value denies DefaultDeny.
type Policy struct {
	AllowPrivate bool           // open every default-denied range (labs, tests)
	Allow        []netip.Prefix // opened even though a deny range covers them
	Deny         []netip.Prefix // denied in addition to DefaultDeny (never opened by AllowPrivate)
	// Self are the relay's own addresses: a client asking a relay to
	// connect to itself reaches services bound to its public address (the
	// admin API, another front end). Allow opens one; AllowPrivate does not.
	Self []netip.Addr
	// DenyPorts are destination ports refused at any address: an open
	// relay to port 25 is a spammer's relay, and a relay's credentials
	// are shared with more people than its operator vouches for.
	DenyPorts []uint16
}

// CheckPort returns a *chain.DeniedError when port is in DenyPorts.
func (p *Policy) CheckPort(port uint16) error {
	if slices.Contains(p.DenyPorts, port) {
		return &chain.DeniedError{Addr: ":" + strconv.Itoa(int(port)), Reason: "deny-port " + strconv.Itoa(int(port))}
	}
	return nil
}

// CheckHostPort checks a destination host:port before anything is
// dialed: the port against DenyPorts (a service name such as "smtp" is
// refused: the resolver would turn it into a denied port), then the host
// as CheckHost does.
func (p *Policy) CheckHostPort(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return &chain.DeniedError{Addr: fmt.Sprintf("%q", hostport), Reason: "bad-address"}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return &chain.DeniedError{Addr: fmt.Sprintf("%q", hostport), Reason: "bad-port"}
	}
	if err := p.CheckPort(uint16(n)); err != nil {
		return err
	}
	return p.CheckHost(host)
}

// Check returns a *chain.DeniedError when ip may not be dialed.
func (p *Policy) Check(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	for _, d := range p.Deny {
		if d.Contains(ip) {
			return &chain.DeniedError{Addr: ip.String(), Reason: "deny-list " + d.String()}
		}
	}
	for _, a := range p.Allow {
		if a.Contains(ip) {
			return nil
		}
	}
	for _, a := range p.Self {
		if a.Unmap().WithZone("") == ip {
			return &chain.DeniedError{Addr: ip.String(), Reason: "self"}
		}
	}
	if p.AllowPrivate {
		return nil
	}
	for _, r := range DefaultDeny {
		if r.Prefix.Contains(ip) {
			return &chain.DeniedError{Addr: ip.String(), Reason: r.Reason}
		}
	}
	return nil
}

// CheckHost checks a destination host before anything is dialed: an IP
// literal against the ranges, a name for its syntax. Names pass otherwise;
// they are checked after resolution by whoever dials them.
func (p *Policy) CheckHost(host string) error {
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.Check(ip)
	}
	if !ValidHostname(host) {
		return &chain.DeniedError{Addr: fmt.Sprintf("%q", host), Reason: "bad-hostname"}
	}
	return nil
}

// ValidHostname says whether name is a plausible DNS name: 1-253 bytes of
// letters, digits, '-', '_' and '.'. Anything else (CR, LF, spaces, ':',
// '/', '@') has no business in a hostname and, passed on, would be a
// header injection into an HTTP next hop's CONNECT line.
func ValidHostname(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// OwnAddrs returns this host's unicast interface addresses outside
// DefaultDeny (those are denied anyway, and AllowPrivate must still reach
// loopback and lab addresses): the addresses a Policy's Self should hold.
func OwnAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var own []netip.Addr
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap().WithZone("")
		if (&Policy{}).Check(ip) == nil {
			own = append(own, ip)
		}
	}
	return own, nil
}

// Control is a net.Dialer.Control function: the kernel is about to connect to
// address (an IP:port after resolution), so this is the only check a DNS
// rebinding cannot slip past.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("policy: unexpected address %q: %w", address, err)
	}
	if err := p.CheckPort(ap.Port()); err != nil {
		return err
	}
	return p.Check(ap.Addr())
}

// Dialer returns a copy of base that enforces the policy on every connect.
func (p *Policy) Dialer(base net.Dialer) *net.Dialer {
	d := base
	d.Control = p.Control
	return &d
}
