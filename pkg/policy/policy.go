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
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "ipv4-compatible"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Policy is the destination rule set. The zero value denies DefaultDeny.
type Policy struct {
	AllowPrivate bool           // open every default-denied range (labs, tests)
	Allow        []netip.Prefix // opened even though a deny range covers them
	Deny         []netip.Prefix // denied in addition to DefaultDeny (never opened by AllowPrivate)
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

// CheckLiteral checks host when it is an IP literal; hostnames pass (they are
// checked after resolution by whoever dials them).
func (p *Policy) CheckLiteral(host string) error {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	return p.Check(ip)
}

// Control is a net.Dialer.Control function: the kernel is about to connect to
// address (an IP:port after resolution), so this is the only check a DNS
// rebinding cannot slip past.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("policy: unexpected address %q: %w", address, err)
	}
	return p.Check(ap.Addr())
}

// Dialer returns a copy of base that enforces the policy on every connect.
func (p *Policy) Dialer(base net.Dialer) *net.Dialer {
	d := base
	d.Control = p.Control
	return &d
}
