package rules

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/dop251/goja"
)

// pacAction runs relaymeshAction of the PAC JavaScript js for url and
// host.
func pacAction(t *testing.T, vm *goja.Runtime, url, host string) string {
	t.Helper()
	f, ok := goja.AssertFunction(vm.Get("relaymeshAction"))
	if !ok {
		t.Fatal("no relaymeshAction in the PAC JavaScript")
	}
	v, err := f(goja.Undefined(), vm.ToValue(url), vm.ToValue(host))
	if err != nil {
		t.Fatalf("relaymeshAction(%q, %q): %v", url, host, err)
	}
	return v.String()
}

func pacRuntime(t *testing.T, s *Set) *goja.Runtime {
	t.Helper()
	var b bytes.Buffer
	if err := s.WritePAC(&b); err != nil {
		t.Fatal(err)
	}
	vm := goja.New()
	if _, err := vm.RunString(b.String()); err != nil {
		t.Fatalf("the PAC JavaScript does not run: %v\n%s", err, b.String())
	}
	return vm
}

// wantPAC is what the PAC file must answer: Match's decision as a PAC
// code.
func wantPAC(s *Set, host string, port uint16) string {
	return PACCode(s.Match(host, port).Action)
}

// The PAC file decides as Match does, on the forms hosts and URLs take in
// a browser.
func TestPACAgreesWithMatch(t *testing.T) {
	s := mustParse(t, `DOMAIN,__proto__,REJECT
DOMAIN-SUFFIX,constructor,DIRECT
DOMAIN-SUFFIX,example.com,DIRECT
DOMAIN-KEYWORD,ads,REJECT
IP-CIDR,203.0.113.0/24,DIRECT
IP-CIDR,203.0.113.128/25,REJECT
IP-CIDR6,2001:db8::/32,REJECT
IP-CIDR6,2001:db8:1::/48,DIRECT
DST-PORT,8443/9000-9100,REJECT
GEOIP,LAN,DIRECT
MATCH,PLAN
`)
	vm := pacRuntime(t, s)
	for _, c := range []struct {
		url, host string
		port      uint16
	}{
		{"https://example.com/", "example.com", 443},
		{"https://www.Example.COM./", "www.Example.COM.", 443},
		{"http://badexample.com/", "badexample.com", 80},
		{"http://myads.net/", "myads.net", 80},
		{"http://__proto__/", "__proto__", 80},
		{"http://x.constructor/", "x.constructor", 80},
		{"http://toString/", "toString", 80},
		{"https://203.0.113.5/", "203.0.113.5", 443},
		{"https://203.0.113.200/", "203.0.113.200", 443},
		{"https://203.0.114.1/", "203.0.114.1", 443},
		{"https://[2001:db8::1]/", "2001:db8::1", 443},
		{"https://[2001:db8::1]/", "[2001:db8::1]", 443},
		{"https://[2001:db8:1::1]/", "2001:DB8:1:0:0:0:0:1", 443},
		{"https://[::ffff:203.0.113.5]/", "::ffff:203.0.113.5", 443},
		{"https://[fe80::1%25eth0]/", "fe80::1%eth0", 443},
		{"https://[2001:db9::1]/", "2001:db9::1", 443},
		{"https://10.0.0.1:8443/", "10.0.0.1", 8443},
		{"http://plain.example:9050/x", "plain.example", 9050},
		{"ws://plain.example/", "plain.example", 80},
		{"wss://plain.example/", "plain.example", 443},
		{"ftp://plain.example/", "plain.example", 21},
		{"http://user:pw@plain.example:9000/", "plain.example", 9000},
		{"https://01.2.3.4/", "01.2.3.4", 443},
		{"https://256.0.0.1/", "256.0.0.1", 443},
		{"https://1.2.3.4./", "1.2.3.4.", 443},
	} {
		if got, want := pacAction(t, vm, c.url, c.host), wantPAC(s, strings.Trim(c.host, "[]"), c.port); got != want {
			t.Errorf("%s (%s): PAC %s, Match %s", c.url, c.host, got, want)
		}
	}
}

// On random rule sets and destinations, the PAC file and Match agree.
func TestPACAgreesWithMatchRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	labels := []string{"a", "b", "ex", "shop", "cdn", "jp"}
	name := func() string {
		parts := make([]string, 1+rng.IntN(4))
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
		b[0], b[1], b[2], b[7], b[15] = 0x20, 0x01, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))
		return netip.AddrFrom16(b)
	}
	actions := []string{"DIRECT", "PLAN", "REJECT", "CHAIN:r1"}
	for round := 0; round < 20; round++ {
		var b strings.Builder
		for i := 0; i < 30; i++ {
			act := actions[rng.IntN(len(actions))]
			switch rng.IntN(6) {
			case 0:
				fmt.Fprintf(&b, "DOMAIN,%s,%s\n", name(), act)
			case 1:
				fmt.Fprintf(&b, "DOMAIN-SUFFIX,%s,%s\n", name(), act)
			case 2:
				fmt.Fprintf(&b, "DOMAIN-KEYWORD,%s,%s\n", labels[rng.IntN(len(labels))], act)
			case 3:
				p, _ := ip4().Prefix(rng.IntN(33))
				fmt.Fprintf(&b, "IP-CIDR,%s,%s\n", p, act)
			case 4:
				p, _ := ip6().Prefix(rng.IntN(129))
				fmt.Fprintf(&b, "IP-CIDR6,%s,%s\n", p, act)
			case 5:
				lo := 1 + rng.IntN(100)
				fmt.Fprintf(&b, "DST-PORT,%d-%d,%s\n", lo, lo+rng.IntN(10), act)
			}
		}
		s := mustParse(t, b.String())
		vm := pacRuntime(t, s)
		for i := 0; i < 100; i++ {
			var host, urlHost string
			switch rng.IntN(3) {
			case 0:
				host = name()
				urlHost = host
			case 1:
				host = ip4().String()
				urlHost = host
			default:
				host = ip6().String()
				urlHost = "[" + host + "]"
			}
			port := uint16(1 + rng.IntN(120))
			url := fmt.Sprintf("https://%s:%d/", urlHost, port)
			if got, want := pacAction(t, vm, url, host), wantPAC(s, host, port); got != want {
				t.Fatalf("%s: PAC %s, Match %s; rules:\n%s", url, got, want, b.String())
			}
		}
	}
}
