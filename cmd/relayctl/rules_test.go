package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeRules(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rules.txt")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// relayctl rules test says which line decides, what each consumer does
// with it, and what it could not check.
func TestRulesTestExplains(t *testing.T) {
	file := writeRules(t, `IP-CIDR,203.0.113.0/24,DIRECT,no-resolve
DST-PORT,25,REJECT
DOMAIN-SUFFIX,example.jp,CHAIN:tokyo,osaka
`)
	out, err := runRelayctl("rules", "test", "--rules", file, "www.example.jp:443", "203.0.113.7:443", "other.example", "mail.example:25")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		file + ": 3 rules (DOMAIN-SUFFIX 1, IP-CIDR 1, DST-PORT 1)",
		"www.example.jp:443\n  line 3: DOMAIN-SUFFIX,example.jp,CHAIN:tokyo,osaka\n  CHAIN through tokyo -> osaka",
		"not checked: 1 IP rule(s) (IP-CIDR, IP-CIDR6, GEOIP) before it: www.example.jp is a name",
		"203.0.113.7:443\n  line 1: IP-CIDR,203.0.113.0/24,DIRECT,no-resolve\n  DIRECT:",
		"other.example\n  no rule matched: PLAN, the default",
		"not checked: 1 DST-PORT rule(s) before it: no port given",
		"mail.example:25\n  line 2: DST-PORT,25,REJECT\n  REJECT: relayctl connect and relays refuse it: SOCKS5 reply 0x02",
		"PAC file: PROXY 127.0.0.1:9",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A bad rule file stops every command that reads it, naming the line;
// --geoip needs --rules; pac takes --rules or --hosts, not both.
func TestRulesFlagErrors(t *testing.T) {
	bad := writeRules(t, "DOMAIN,a.example,DIRECT\nDOMAIN,b.example,PROXY\n")
	for _, args := range [][]string{
		{"rules", "test", "--rules", bad, "a.example"},
		{"pac", "--proxy", "127.0.0.1:1080", "--rules", bad},
	} {
		if _, err := runRelayctl(args...); err == nil || !strings.Contains(err.Error(), bad+`:2: "PROXY" is not an action`) {
			t.Errorf("%v: %v", args, err)
		}
	}
	good := writeRules(t, "MATCH,PLAN\n")
	if _, err := runRelayctl("pac", "--proxy", "127.0.0.1:1080", "--geoip", "Country.mmdb"); err == nil || !strings.Contains(err.Error(), "give --rules FILE too") {
		t.Errorf("--geoip without --rules: %v", err)
	}
	if _, err := runRelayctl("pac", "--proxy", "127.0.0.1:1080", "--rules", good, "--hosts", "*.jp"); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("--rules and --hosts: %v", err)
	}
	if _, err := runRelayctl("rules", "test", "a.example"); err == nil || !strings.Contains(err.Error(), "--rules FILE") {
		t.Errorf("rules test without --rules: %v", err)
	}
}

// pac --rules writes the rules' function and answers by it; REJECT never
// falls back to DIRECT.
func TestPACWithRules(t *testing.T) {
	file := writeRules(t, "DOMAIN-SUFFIX,example.jp,DIRECT\nDOMAIN-KEYWORD,ads,REJECT\n")
	out, err := runRelayctl("pac", "--proxy", "127.0.0.1:1080", "--rules", file, "--fallback-direct")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"// relaymesh rules: 2 from " + file,
		"function relaymeshAction(url, host) {",
		"switch (relaymeshAction(url, host)) {\n  case \"D\":\n    return \"DIRECT\";\n  case \"R\":\n    return \"PROXY 127.0.0.1:9\";\n  }\n",
		`return "SOCKS5 127.0.0.1:1080; DIRECT";`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("PAC lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"isInNet", "dnsResolve", "PROXY 127.0.0.1:9; DIRECT"} {
		if strings.Contains(out, bad) {
			t.Errorf("PAC has %q", bad)
		}
	}
}
