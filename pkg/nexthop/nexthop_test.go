package nexthop

import (
	"errors"
	"strings"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/socks5"
)

func TestParse(t *testing.T) {
	good := map[string]chain.Hop{
		"socks5://1.2.3.4:1080":        {Scheme: "socks5", Addr: "1.2.3.4:1080"},
		"socks5h://u:p@h.example:1080": {Scheme: "socks5", Addr: "h.example:1080", User: "u", Password: "p"},
		"SOCKS5://h.example:1080/":     {Scheme: "socks5", Addr: "h.example:1080"},
		"http://[::1]:3128":            {Scheme: "http", Addr: "[::1]:3128"},
		"relaymesh://r.example:7000":   {Scheme: "relaymesh", Addr: "r.example:7000"},
	}
	for raw, want := range good {
		got, err := Parse(raw)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v", raw, got, err)
		}
	}
	bad := map[string]string{
		"ftp://h:1":                  `unsupported scheme "ftp"`,
		"h:1":                        `unsupported scheme "h"`,
		"socks5://h":                 "want scheme://[user:pass@]host:port",
		"socks5://:1":                "want scheme://[user:pass@]host:port",
		"http://h:1/path":            `unexpected path "/path"`,
		"relaymesh://u:secret@a:700": "relaymesh:// hops take no user:password (the fleet secret authenticates them)",
	}
	for raw, want := range bad {
		_, err := Parse(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", raw, err, want)
		}
	}
	for _, raw := range []string{"gopher://u:topsecret@h:1", "relaymesh://u:topsecret@h:1", "socks5://u:topsecret@h:1/x"} {
		if _, err := Parse(raw); err == nil || strings.Contains(err.Error(), "topsecret") {
			t.Errorf("%s: error must not carry the password: %v", raw, err)
		}
	}
}

// The registry, not a list of its own, decides what Parse accepts and what
// its errors offer.
func TestRegistryDrivesParse(t *testing.T) {
	for _, s := range Schemes() {
		for _, name := range append([]string{s.Name, strings.ToUpper(s.Name)}, s.Aliases...) {
			h, err := Parse(name + "://h.example:1")
			if err != nil || h.Scheme != s.Name {
				t.Errorf("%s://: %+v %v, want scheme %s", name, h, err, s.Name)
			}
			_, err = Parse(name + "://u:p@h.example:1")
			if (err == nil) != s.UserInfo {
				t.Errorf("%s:// with user:password: %v, want accepted = %v", name, err, s.UserInfo)
			}
		}
	}
	_, err := Parse("gopher://h:1")
	if err == nil {
		t.Fatal("gopher:// accepted")
	}
	for _, s := range Schemes() {
		if !strings.Contains(err.Error(), s.Name+"://") {
			t.Errorf("%v: does not offer %s://", err, s.Name)
		}
	}
	if want := "(want socks5://, http:// or relaymesh://)"; !strings.Contains(err.Error(), want) {
		t.Errorf("%v: want it to end %s", err, want)
	}
}

// Every name and alias means one scheme, and is what Lookup matches.
func TestSchemeNamesAreUnique(t *testing.T) {
	seen := map[string]string{}
	for _, s := range Schemes() {
		if s.New == nil {
			t.Errorf("%s: no New", s.Name)
		}
		for _, n := range append([]string{s.Name}, s.Aliases...) {
			if n != strings.ToLower(n) || n == "" {
				t.Errorf("%s: name %q must be lower case and not empty", s.Name, n)
			}
			if other, dup := seen[n]; dup {
				t.Errorf("%q names both %s and %s", n, other, s.Name)
			}
			seen[n] = s.Name
		}
	}
	if s, ok := Lookup(Relaymesh); !ok || !s.FleetSecret || !s.Routes() {
		t.Errorf("%s: %+v %v, want the fleet-secret, routed scheme", Relaymesh, s, ok)
	}
}

func TestBuild(t *testing.T) {
	secret := []byte("0123456789abcdef")
	for _, s := range Schemes() {
		h, err := Build(chain.Hop{Scheme: s.Name, Addr: "h:1"}, Options{Secret: secret})
		if err != nil || h.Client == nil {
			t.Fatalf("%s: %+v %v", s.Name, h, err)
		}
		if h.Routed() != s.Routes() {
			t.Errorf("%s: hop routed %v, scheme routes %v", s.Name, h.Routed(), s.Routes())
		}
		_, err = Build(chain.Hop{Scheme: s.Name, Addr: "h:1"}, Options{})
		if s.FleetSecret != errors.Is(err, ErrNoSecret) {
			t.Errorf("%s without the secret: %v", s.Name, err)
		}
	}
	h, err := Parse("socks5h://u:p@h:1")
	if err == nil {
		h, err = Build(h, Options{})
	}
	if c, ok := h.Client.(socks5.Client); err != nil || !ok || c.User != "u" || c.Password != "p" || h.Scheme != "socks5" {
		t.Errorf("socks5h://u:p@: %+v %v, want a socks5 client with the credentials", h, err)
	}
	if _, err := Build(chain.Hop{Scheme: "gopher", Addr: "h:1"}, Options{}); err == nil {
		t.Error("built a gopher:// hop")
	}
}
