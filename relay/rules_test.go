package relay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// planConfig is a sound routing: plan config on a fleet file, with
// planning.rules set to a file holding rules.
func planConfig(t *testing.T, rules string) Config {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := Defaults()
	cfg.Name = "r1"
	cfg.Fleet = write("fleet.yaml", "relays:\n  - {name: r1, admin: 127.0.0.1:1, relay: 127.0.0.1:2}\n")
	cfg.FleetSecretFile = write("fleet.key", "0123456789abcdef0123\n")
	cfg.Policy.RelayAllow = []string{"127.0.0.1/32"} // the fleet's relays
	cfg.Routing = "plan"
	cfg.Planning.Rules = write("rules.txt", rules)
	return cfg
}

// relayd check (and run, which refuses to start) names each bad line of
// planning.rules with its number, one error a line, and warns of rules
// that can never decide.
func TestCheckNamesBadRuleLines(t *testing.T) {
	cfg := planConfig(t, "DOMAIN-SUFFIX,example.jp,DIRECT\nDOMAIN-SUFFIX,example.cn,PROXY\nIP-CIDR,10.0.0.0/33,REJECT\nMATCH,PLAN\n")
	_, err := Check(cfg, false)
	if err == nil {
		t.Fatal("relayd check passed a bad rule file")
	}
	for _, want := range []string{
		"planning.rules: " + cfg.Planning.Rules + `:2: "PROXY" is not an action`,
		"planning.rules: " + cfg.Planning.Rules + ":3: IP-CIDR,10.0.0.0/33: not a CIDR prefix",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check's error lacks %q:\n%v", want, err)
		}
	}
	if _, nerr := New(cfg, zap.NewNop()); nerr == nil || nerr.Error() != err.Error() {
		t.Errorf("New and Check disagree:\nNew:   %v\nCheck: %v", nerr, err)
	}

	cfg = planConfig(t, "MATCH,PLAN\nDOMAIN,late.example,REJECT\n")
	w, err := Check(cfg, false)
	if err != nil || len(w) != 1 || !strings.Contains(w[0], "planning.rules: "+cfg.Planning.Rules+":2: never decides") {
		t.Fatalf("a rule after MATCH: warnings %q, error %v", w, err)
	}
}

// relayd check warns of a relay a CHAIN rule names that the fleet file
// does not list: its tunnels would fail.
func TestCheckWarnsOfUnknownChainRelays(t *testing.T) {
	cfg := planConfig(t, "DOMAIN-SUFFIX,example.jp,CHAIN:r1,ghost\nMATCH,PLAN\n")
	w, err := Check(cfg, false)
	if err != nil || len(w) != 1 || !strings.Contains(w[0], "planning.rules: CHAIN relay ghost is not in the fleet file "+cfg.Fleet) {
		t.Fatalf("warnings %q, error %v", w, err)
	}
}

// planning.rules is routing: plan's: set with static routing it is an
// error, not silently ignored; so is a GeoIP database without rules.
func TestRulesNeedRoutingPlan(t *testing.T) {
	cfg := Defaults()
	cfg.Planning.Rules = "rules.txt"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "apply only with routing: plan") {
		t.Fatalf("rules with static routing: %v", err)
	}
	cfg = planConfig(t, "MATCH,PLAN\n")
	cfg.Planning.Rules, cfg.Planning.GeoIP = "", "Country.mmdb"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "planning.geoip: serves planning.rules") {
		t.Fatalf("geoip without rules: %v", err)
	}
}
