package policy

import (
	"net/netip"
	"testing"
)

func TestDefaultDeny(t *testing.T) {
	p := &Policy{}
	for _, s := range []string{"127.0.0.1", "127.9.9.9", "::1", "0.0.0.0", "::", "169.254.169.254", "10.1.2.3",
		"172.31.255.255", "192.168.0.1", "100.64.0.1", "100.127.255.254", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"fe80::1", "fc00::1", "fd12::1", "224.0.0.1", "::127.0.0.1",
		// Ranges that reach the ones above through a translator, and
		// other special-purpose ones (192.0.0.192 is a cloud metadata address).
		"64:ff9b::a9fe:a9fe", "64:ff9b:1::1", "2002:a9fe:a9fe::1", "2001:0:a9fe::1", "192.0.0.192",
		"198.18.0.1", "198.19.255.255", "192.0.2.1", "198.51.100.1", "203.0.113.1", "2001:db8::1",
		// The rest of the special-purpose registries: site-local,
		// IPv4-translated (SIIT, to 169.254.169.254), discard-only,
		// the 6to4 relay anycast, benchmarking, ORCHID (both), documentation.
		"fec0::1", "feff:ffff::1", "::ffff:0:a9fe:a9fe", "100::1", "192.88.99.1", "2001:2::1", "2001:1f::1", "2001:2f::1", "3fff::1", "3fff:fff::1"} {
		if err := p.Check(netip.MustParseAddr(s)); err == nil {
			t.Errorf("%s allowed", s)
		}
	}
	for _, s := range []string{"1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "2001:4860::8888", "198.20.0.1", "192.0.1.1",
		// Just outside the ranges added last.
		"192.88.100.1", "2001:3::1", "2001:200::1", "3fff:1000::1", "100:0:0:1::1"} {
		if err := p.Check(netip.MustParseAddr(s)); err != nil {
			t.Errorf("%s denied: %v", s, err)
		}
	}
}

func TestAllowAndDeny(t *testing.T) {
	p := &Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}, Deny: []netip.Prefix{netip.MustParsePrefix("8.8.8.0/24")}}
	if p.Check(netip.MustParseAddr("10.20.1.1")) != nil {
		t.Error("allow-listed range denied")
	}
	if p.Check(netip.MustParseAddr("10.21.1.1")) == nil {
		t.Error("allow list opened too much")
	}
	if p.Check(netip.MustParseAddr("8.8.8.8")) == nil {
		t.Error("deny list ignored")
	}
	all := &Policy{AllowPrivate: true, Deny: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}}
	if all.Check(netip.MustParseAddr("127.0.0.1")) != nil || all.Check(netip.MustParseAddr("169.254.169.254")) == nil {
		t.Error("AllowPrivate with an explicit deny")
	}
}

func TestControl(t *testing.T) {
	p := &Policy{}
	if err := p.Control("tcp4", "127.0.0.1:80", nil); err == nil {
		t.Error("Control let loopback through")
	}
	if err := p.Control("tcp6", "[2606:4700::1111]:443", nil); err != nil {
		t.Error(err)
	}
}

func TestSelf(t *testing.T) {
	own := netip.MustParseAddr("203.0.114.7")
	p := &Policy{AllowPrivate: true, Self: []netip.Addr{own}}
	if p.Check(own) == nil || p.Check(netip.MustParseAddr("::ffff:203.0.114.7")) == nil {
		t.Error("the relay's own address allowed (AllowPrivate must not open it)")
	}
	p.Allow = []netip.Prefix{netip.MustParsePrefix("203.0.114.7/32")}
	if err := p.Check(own); err != nil {
		t.Errorf("an explicit allow does not open the relay's own address: %v", err)
	}
}

func TestCheckHost(t *testing.T) {
	p := &Policy{}
	for _, h := range []string{"example.com", "a-b.example", "_srv.example.org", "xn--bcher-kva.example"} {
		if err := p.CheckHost(h); err != nil {
			t.Errorf("%q: %v", h, err)
		}
	}
	for _, h := range []string{"127.0.0.1", "evil.com\r\nX-Injected: 1", "a b", "host:80", "a/b", "", "user@host", "x\x00y"} {
		if p.CheckHost(h) == nil {
			t.Errorf("%q allowed", h)
		}
	}
}

func TestDenyPorts(t *testing.T) {
	p := &Policy{AllowPrivate: true, DenyPorts: []uint16{25}}
	for _, d := range []string{"1.1.1.1:25", "example.com:25", "example.com:smtp", "[2606:4700::1111]:25", "no-port"} {
		if p.CheckHostPort(d) == nil {
			t.Errorf("%s allowed", d)
		}
	}
	for _, d := range []string{"1.1.1.1:587", "example.com:443", "[2606:4700::1111]:80"} {
		if err := p.CheckHostPort(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	if p.Control("tcp4", "1.1.1.1:25", nil) == nil {
		t.Error("Control let port 25 through")
	}
	if err := (&Policy{AllowPrivate: true}).CheckHostPort("1.1.1.1:25"); err != nil {
		t.Errorf("no DenyPorts, port 25 refused: %v", err)
	}
}
