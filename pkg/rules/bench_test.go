package rules

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// benchRules is a rule file of n lines, as large rule sets are: mostly
// domain suffixes (three quarters), the rest IPv4 and IPv6 prefixes of
// lengths 8-32 and 16-64, a few keywords, ending with MATCH. It returns the
// file and destinations to look up: names under its suffixes and not,
// addresses inside its prefixes and not.
func benchRules(n int) ([]byte, []string) {
	rng := rand.New(rand.NewPCG(7, 7))
	tlds := []string{"com", "net", "org", "jp", "cn", "de", "io"}
	word := func() string {
		const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, 4+rng.IntN(8))
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	actions := []string{"DIRECT", "PLAN", "REJECT", "CHAIN:tokyo,osaka"}
	var b bytes.Buffer
	var dsts []string
	for i := 0; i < n-1; i++ {
		act := actions[rng.IntN(len(actions))]
		switch k := rng.IntN(100); {
		case k < 75:
			d := word() + "." + tlds[rng.IntN(len(tlds))]
			fmt.Fprintf(&b, "DOMAIN-SUFFIX,%s,%s\n", d, act)
			if i%10 == 0 {
				dsts = append(dsts, "www."+d+":443", word()+"."+tlds[rng.IntN(len(tlds))]+":443")
			}
		case k < 95:
			a := netip.AddrFrom4([4]byte{byte(rng.IntN(224)), byte(rng.IntN(256)), byte(rng.IntN(256)), 0})
			p, _ := a.Prefix(8 + rng.IntN(25))
			fmt.Fprintf(&b, "IP-CIDR,%s,%s,no-resolve\n", p, act)
			if i%10 == 0 {
				in := p.Addr().As4()
				in[3] |= 1
				dsts = append(dsts, netip.AddrFrom4(in).String()+":443")
			}
		case k < 99:
			var a [16]byte
			a[0], a[1], a[2], a[3] = 0x20, 0x01, byte(rng.IntN(256)), byte(rng.IntN(256))
			p, _ := netip.AddrFrom16(a).Prefix(16 + rng.IntN(49))
			fmt.Fprintf(&b, "IP-CIDR6,%s,%s,no-resolve\n", p, act)
			if i%10 == 0 {
				dsts = append(dsts, "["+p.Addr().Next().String()+"]:443")
			}
		default:
			fmt.Fprintf(&b, "DOMAIN-KEYWORD,%s,%s\n", word(), act)
		}
	}
	b.WriteString("MATCH,PLAN\n")
	return b.Bytes(), dsts
}

// BenchmarkLoad10k parses and indexes a 10,000-line rule file (the target:
// under 200 ms).
func BenchmarkLoad10k(b *testing.B) {
	file, _ := benchRules(10000)
	b.SetBytes(int64(len(file)))
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(file), "bench", nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMatch10k looks up destinations, names and addresses, hits and
// misses, in a 10,000-line rule set (the target: under 2 µs a lookup).
func BenchmarkMatch10k(b *testing.B) {
	file, dsts := benchRules(10000)
	s, err := Parse(bytes.NewReader(file), "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = s.MatchAddr(dsts[i%len(dsts)])
		i++
	}
}

// The benchmark's rule set is what it says: 10,000 rules, and its
// destinations find rules (not only MATCH) and miss them.
func TestBenchRules(t *testing.T) {
	file, dsts := benchRules(10000)
	s, err := Parse(bytes.NewReader(file), "bench", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rules) != 10000 {
		t.Fatalf("%d rules", len(s.Rules))
	}
	hits := 0
	for _, d := range dsts {
		if r := s.MatchAddr(d).Rule; r != nil && r.Kind != KindMatch {
			hits++
		}
	}
	if hits < len(dsts)/3 || hits == len(dsts) {
		t.Fatalf("%d of %d destinations hit a rule", hits, len(dsts))
	}
}

// BenchmarkMatchKeywords1k looks up names in a set of 1,000
// DOMAIN-KEYWORD rules that none of them contains: the keyword automaton's
// cost, which does not grow with the number of keywords.
func BenchmarkMatchKeywords1k(b *testing.B) {
	var sb bytes.Buffer
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&sb, "DOMAIN-KEYWORD,kw%04dx,REJECT\n", i)
	}
	s, err := Parse(&sb, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.MatchAddr("www.some-long-name.example.com:443")
	}
}
