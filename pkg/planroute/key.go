package planroute

import (
	"net"
	"net/netip"
	"strings"
)

// Prefix lengths that make one destination key of nearby literal
// addresses: hosts of one /24 (IPv4) or /48 (IPv6, a site's allocation)
// are almost always behind the same paths, so one survey serves them.
const (
	keyBitsIPv4 = 24
	keyBitsIPv6 = 48
)

// DestinationKey is what a PerDestination caches a survey and plan under
// for dst (host:port, or a bare host): the host without the port, so one
// survey serves every port of it; a literal IPv4 address by its /24 and a
// literal IPv6 address by its /48 (IPv4-mapped IPv6 counts as IPv4, a zone
// is dropped), so one serves nearby addresses too; a name by itself, in
// lower case and without a trailing dot.
func DestinationKey(dst string) string {
	host := dst
	if h, _, err := net.SplitHostPort(dst); err == nil {
		host = h
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.WithZone("").Unmap()
		bits := keyBitsIPv6
		if a.Is4() {
			bits = keyBitsIPv4
		}
		p, _ := a.Prefix(bits) // bits fit both families: no error
		return p.String()
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}
