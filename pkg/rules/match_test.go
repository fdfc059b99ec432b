package rules

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// matchSlow is the definition Match implements with its indexes: try the
// rules in file order, the first that matches decides. Tests hold Match
// to it.
func matchSlow(s *Set, host string, port uint16) int {
	addr, err := netip.ParseAddr(host)
	isIP := err == nil
	if isIP {
		addr = addr.WithZone("").Unmap()
	}
	name := normalName(host)
	for _, r := range s.Rules {
		ok := false
		switch r.Kind {
		case KindDomain:
			ok = !isIP && name == r.Value
		case KindDomainSuffix:
			ok = !isIP && (name == r.Value || strings.HasSuffix(name, "."+r.Value))
		case KindDomainKeyword:
			ok = !isIP && strings.Contains(name, r.Value)
		case KindIPCIDR, KindIPCIDR6:
			ok = isIP && netip.MustParsePrefix(r.Value).Contains(addr)
		case KindGeoIP:
			if isIP && r.Value == "LAN" {
				for _, p := range LANPrefixes {
					ok = ok || p.Contains(addr)
				}
			} else if isIP && s.geoDB != nil {
				ok = s.geoDB.Country(addr) == r.Value
			}
		case KindDstPort:
			ports, _ := parsePorts(r.Value)
			for _, p := range ports {
				ok = ok || port != 0 && port >= p.lo && port <= p.hi
			}
		case KindMatch:
			ok = true
		}
		if ok {
			return r.Line
		}
	}
	return 0
}

func TestMatchEachKind(t *testing.T) {
	s := mustParse(t, `DOMAIN,exact.example,DIRECT
DOMAIN-SUFFIX,suffix.example,CHAIN:r1,r2
DOMAIN-KEYWORD,tracker,REJECT
IP-CIDR,203.0.113.0/24,DIRECT
IP-CIDR6,2001:db8::/32,REJECT,no-resolve
DST-PORT,25/465-587,REJECT
GEOIP,LAN,DIRECT
`)
	for _, c := range []struct {
		dst  string
		line int
		act  string
	}{
		{"exact.example:443", 1, "DIRECT"},
		{"EXACT.Example.:443", 1, "DIRECT"},
		{"a.exact.example:443", 0, "PLAN"},
		{"suffix.example:443", 2, "CHAIN:r1,r2"},
		{"deep.a.suffix.example:80", 2, "CHAIN:r1,r2"},
		{"notsuffix.example:80", 0, "PLAN"},
		{"ads.tracker.example:443", 3, "REJECT"},
		{"mytrackers.example:443", 3, "REJECT"},
		{"203.0.113.9:443", 4, "DIRECT"},
		{"[::ffff:203.0.113.9]:443", 4, "DIRECT"},
		{"203.0.114.1:443", 0, "PLAN"},
		{"[2001:db8::1]:443", 5, "REJECT"},
		{"[2001:db9::1]:443", 0, "PLAN"},
		{"mail.example:25", 6, "REJECT"},
		{"mail.example:500", 6, "REJECT"},
		{"mail.example:588", 0, "PLAN"},
		{"192.168.1.1:80", 7, "DIRECT"},
		{"[fe80::1%eth0]:80", 7, "DIRECT"},
		{"[::1]:80", 7, "DIRECT"},
		{"exact.example", 1, "DIRECT"},
		{"plain.example", 0, "PLAN"},
	} {
		d := s.MatchAddr(c.dst)
		line := 0
		if d.Rule != nil {
			line = d.Rule.Line
		}
		if line != c.line || d.Action.String() != c.act {
			t.Errorf("%s: line %d %s, want line %d %s", c.dst, line, d.Action, c.line, c.act)
		}
	}
	// A name is never resolved for IP rules, and says so.
	if d := s.MatchAddr("plain.example:443"); d.UnresolvedIPRules != 3 || d.NoPortRules != 0 {
		t.Errorf("plain.example:443: %+v", d)
	}
	if d := s.MatchAddr("plain.example"); d.NoPortRules != 1 {
		t.Errorf("plain.example: %+v", d)
	}
	if d := s.MatchAddr("suffix.example:443"); d.UnresolvedIPRules != 0 {
		t.Errorf("suffix.example: %+v", d)
	}
}

// The first rule in file order decides, whichever table finds it: an
// earlier keyword beats a later exact name, an earlier port a later
// prefix, MATCH everything after it.
func TestMatchFirstRuleWins(t *testing.T) {
	s := mustParse(t, `DOMAIN-KEYWORD,shop,REJECT
DOMAIN,shop.example,DIRECT
DST-PORT,8443,CHAIN:r9
IP-CIDR,10.0.0.0/8,DIRECT
IP-CIDR,10.1.0.0/16,REJECT
DOMAIN-SUFFIX,example,CHAIN:r1
DOMAIN-SUFFIX,a.example,DIRECT
MATCH,DIRECT
DOMAIN,late.example,REJECT
`)
	for dst, line := range map[string]int{
		"shop.example:443":  1,
		"10.1.2.3:443":      4,
		"10.1.2.3:8443":     3,
		"x.a.example:443":   6,
		"late.example:443":  6,
		"late.elsewhere:80": 8,
	} {
		if d := s.MatchAddr(dst); d.Rule == nil || d.Rule.Line != line {
			t.Errorf("%s: %+v, want line %d", dst, d.Rule, line)
		}
	}
}

// Match agrees with the rules tried one by one, on random rule sets and
// destinations that hit and miss them.
func TestMatchAgreesWithFileOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	labels := []string{"a", "b", "ex", "shop", "cdn", "jp", "com"}
	name := func() string {
		n := 1 + rng.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = labels[rng.IntN(len(labels))]
		}
		return strings.Join(parts, ".")
	}
	ip4 := func() netip.Addr {
		return netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))})
	}
	ip6 := func() netip.Addr {
		var b [16]byte
		b[0], b[1], b[2], b[15] = 0x20, 0x01, byte(rng.IntN(4)), byte(rng.IntN(256))
		return netip.AddrFrom16(b)
	}
	actions := []string{"DIRECT", "PLAN", "REJECT", "CHAIN:r1"}
	for round := 0; round < 50; round++ {
		var b strings.Builder
		for i := 0; i < 40; i++ {
			act := actions[rng.IntN(len(actions))]
			switch rng.IntN(6) {
			case 0:
				fmt.Fprintf(&b, "DOMAIN,%s,%s\n", name(), act)
			case 1:
				fmt.Fprintf(&b, "DOMAIN-SUFFIX,%s,%s\n", name(), act)
			case 2:
				fmt.Fprintf(&b, "DOMAIN-KEYWORD,%s,%s\n", labels[rng.IntN(len(labels))], act)
			case 3:
				p, _ := ip4().Prefix(8 + rng.IntN(25))
				fmt.Fprintf(&b, "IP-CIDR,%s,%s\n", p, act)
			case 4:
				p, _ := ip6().Prefix(8 + rng.IntN(121))
				fmt.Fprintf(&b, "IP-CIDR6,%s,%s\n", p, act)
			case 5:
				lo := 1 + rng.IntN(100)
				fmt.Fprintf(&b, "DST-PORT,%d-%d,%s\n", lo, lo+rng.IntN(10), act)
			}
		}
		s := mustParse(t, b.String())
		for i := 0; i < 200; i++ {
			var host string
			switch rng.IntN(3) {
			case 0:
				host = name()
			case 1:
				host = ip4().String()
			default:
				host = ip6().String()
			}
			port := uint16(rng.IntN(120))
			d := s.Match(host, port)
			got := 0
			if d.Rule != nil {
				got = d.Rule.Line
			}
			if want := matchSlow(s, host, port); got != want {
				t.Fatalf("%s port %d: line %d, want line %d, rules:\n%s", host, port, got, want, b.String())
			}
		}
	}
}

// The keyword automaton finds the first keyword in file order that a name
// contains, for keywords that overlap, nest and share prefixes and
// suffixes (its failure links), as trying each keyword does.
func TestKeywordIndexAgreesWithContains(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	word := func(n int) string {
		b := make([]byte, 1+rng.IntN(n))
		for i := range b {
			b[i] = "abc."[rng.IntN(4)]
		}
		return string(b)
	}
	for round := 0; round < 200; round++ {
		var kws []indexed[string]
		for i := 0; i < 1+rng.IntN(30); i++ {
			kws = append(kws, indexed[string]{word(5), int32(i)})
		}
		k := buildKeywords(kws)
		for i := 0; i < 50; i++ {
			name := word(20) + "x" + word(5)
			want := int32(none)
			for _, kw := range kws {
				if strings.Contains(name, kw.v) {
					want = kw.idx
					break
				}
			}
			if got := k.firstIn(name); got != want {
				t.Fatalf("%q in %v: %d, want %d", name, kws, got, want)
			}
		}
	}
}
