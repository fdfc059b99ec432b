package rules

import (
	"strings"
	"testing"
)

func mustParse(t testing.TB, text string) *Set {
	t.Helper()
	s, err := Parse(strings.NewReader(text), "test.rules", nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every kind of bad line is named with its file and line number, and says
// what is wrong; the good lines around it do not hide it.
func TestParseErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct {
		line, want string
	}{
		{"DOMAN,example.com,DIRECT", `"DOMAN" is not a rule type`},
		{"RULE-SET,ads,REJECT", "RULE-SET is not supported: inline the provider's payload"},
		{"SRC-IP-CIDR,10.0.0.0/8,DIRECT", "rules match the destination, not the client"},
		{"DOMAIN-SUFFIX", "wants a value and an action"},
		{"DOMAIN-SUFFIX,example.com", "has no action"},
		{"DOMAIN-SUFFIX,example.com,PROXY", `"PROXY" is not an action`},
		{"DOMAIN-SUFFIX,example.com,REJECT-DROP", "write REJECT"},
		{"DOMAIN-SUFFIX,example.com,CHAIN:", `"" is not a relay name`},
		{"DOMAIN-SUFFIX,example.com,CHAIN:a,b c", `"b c" is not a relay name`},
		{"DOMAIN-SUFFIX,example.com,DIRECT,no-resolve", "no-resolve applies to IP-CIDR"},
		{"IP-CIDR,10.0.0.0/8,DIRECT,src", `"src": not an option`},
		{"DOMAIN-SUFFIX,.example.com,DIRECT", "without a leading dot"},
		{"DOMAIN,*.example.com,DIRECT", "without a leading dot or wildcard"},
		{"DOMAIN,exa mple.com,DIRECT", "not a domain name"},
		{"DOMAIN,example..com,DIRECT", "not a domain name"},
		{"DOMAIN,10.1.2.3,DIRECT", "write IP-CIDR,10.1.2.3/32"},
		{"DOMAIN-KEYWORD,a b,DIRECT", "a keyword is part of a name"},
		{"IP-CIDR,10.0.0.0/33,DIRECT", "not a CIDR prefix"},
		{"IP-CIDR,10.1.2.3,DIRECT", "want a prefix: 10.1.2.3/32"},
		{"IP-CIDR6,fe80::/10%eth0,DIRECT", "not a CIDR prefix"},
		{"DST-PORT,0,DIRECT", `"0": want a port 1-65535`},
		{"DST-PORT,9000-8000,DIRECT", `"9000-8000"`},
		{"DST-PORT,http,DIRECT", `"http"`},
		{"DST-PORT,70000,DIRECT", `"70000"`},
		{"GEOIP,JPN,DIRECT", "two-letter country code"},
		{"GEOIP,JP,DIRECT", "GEOIP needs a MaxMind-format country database"},
		{"MATCH", "MATCH wants an action"},
		{"MATCH,DIRECT,extra", `MATCH: unexpected "extra"`},
	} {
		t.Run(c.line, func(t *testing.T) {
			text := "# a comment\nDOMAIN,ok.example,DIRECT\n\n" + c.line + "\nMATCH,PLAN\n"
			_, err := Parse(strings.NewReader(text), "test.rules", nil)
			if err == nil {
				t.Fatalf("accepted")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "test.rules:4: ") || !strings.Contains(msg, c.want) {
				t.Fatalf("got %q, want test.rules:4: ...%s...", msg, c.want)
			}
			if strings.Count(msg, "\n") != 0 {
				t.Fatalf("one bad line, several errors: %q", msg)
			}
		})
	}
}

// A file's every bad line is named, not only the first, up to maxErrors.
func TestParseNamesEveryBadLine(t *testing.T) {
	_, err := Parse(strings.NewReader("BAD,1\nDOMAIN,a.example,DIRECT\nBAD,2\n"), "f", nil)
	if err == nil || !strings.Contains(err.Error(), "f:1: ") || !strings.Contains(err.Error(), "f:3: ") {
		t.Fatalf("%v", err)
	}
	_, err = Parse(strings.NewReader(strings.Repeat("BAD\n", 100)), "f", nil)
	if n := strings.Count(err.Error(), "\n") + 1; n != maxErrors+1 || !strings.Contains(err.Error(), "more bad lines follow") {
		t.Fatalf("%d lines of error:\n%v", n, err)
	}
}

// What parses, and how it is normalised.
func TestParseForms(t *testing.T) {
	s := mustParse(t, `rules:
  - DOMAIN-SUFFIX,Example.COM.,DIRECT
  - 'DOMAIN,bücher.example,REJECT'
  - "IP-CIDR,10.1.2.3/8,CHAIN:tokyo,osaka,no-resolve"
  - ip-cidr6, ::ffff:192.168.0.0/112 , plan
  - DST-PORT,22/8000-9000,reject
  - GEOIP,lan,DIRECT
  - FINAL,PLAN
DOMAIN,after.example,DIRECT
`)
	want := []struct {
		kind   Kind
		value  string
		action string
		line   int
	}{
		{KindDomainSuffix, "example.com", "DIRECT", 2},
		{KindDomain, "xn--bcher-kva.example", "REJECT", 3},
		{KindIPCIDR, "10.0.0.0/8", "CHAIN:tokyo,osaka", 4},
		{KindIPCIDR6, "192.168.0.0/16", "PLAN", 5},
		{KindDstPort, "22/8000-9000", "REJECT", 6},
		{KindGeoIP, "LAN", "DIRECT", 7},
		{KindMatch, "", "PLAN", 8},
		{KindDomain, "after.example", "DIRECT", 9},
	}
	if len(s.Rules) != len(want) {
		t.Fatalf("%d rules: %+v", len(s.Rules), s.Rules)
	}
	for i, w := range want {
		r := s.Rules[i]
		if r.Kind != w.kind || r.Value != w.value || r.Action.String() != w.action || r.Line != w.line {
			t.Errorf("rule %d: %v %q %s line %d, want %v %q %s line %d", i, r.Kind, r.Value, r.Action, r.Line, w.kind, w.value, w.action, w.line)
		}
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "test.rules:9: never decides: MATCH on line 8") {
		t.Fatalf("warnings: %q", s.Warnings)
	}
	if got := s.Relays(); strings.Join(got, ",") != "tokyo,osaka" {
		t.Fatalf("relays %v", got)
	}
	if got := s.Counts(); got != "DOMAIN 2, DOMAIN-SUFFIX 1, IP-CIDR 1, IP-CIDR6 1, DST-PORT 1, GEOIP 1, MATCH 1" {
		t.Fatalf("counts %q", got)
	}
}

// Parse never panics, and what it accepts matches without panicking and
// by file order.
func FuzzParse(f *testing.F) {
	f.Add("DOMAIN-SUFFIX,example.com,DIRECT\nIP-CIDR,10.0.0.0/8,CHAIN:a,b,no-resolve\nMATCH,PLAN\n", "a.example.com", uint16(443))
	f.Add("- 'DST-PORT,80/8000-9000,REJECT'\nGEOIP,LAN,DIRECT\n", "10.1.2.3", uint16(8080))
	f.Add("DOMAIN-KEYWORD,ads,REJECT\nIP-CIDR6,::ffff:0:0/96,DIRECT\n", "::ffff:1.2.3.4", uint16(0))
	f.Fuzz(func(t *testing.T, text, host string, port uint16) {
		s, err := Parse(strings.NewReader(text), "fuzz", nil)
		if err != nil {
			return
		}
		d := s.Match(host, port)
		got := 0
		if d.Rule != nil {
			got = d.Rule.Line
		}
		if want := matchSlow(s, host, port); got != want {
			t.Fatalf("%q port %d: line %d, want line %d", host, port, got, want)
		}
	})
}
