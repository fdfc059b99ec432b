package relay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestNativeConfig(t *testing.T) {
	good := []struct{ name, yaml string }{
		{"relay listener with secret", "relay: ':7000'\nfleet_secret: 0123456789abcdef"},
		{"relaymesh hops with secret file", "next: [relaymesh://a:7000, relaymesh://b:7000]\nfleet_secret_file: /etc/relaymesh/fleet.key"},
		{"relay listener only", "socks: ''\nhttp: ''\nrelay: 127.0.0.1:7000\nfleet_secret: 0123456789abcdef"},
		{"mixed hops", "next: [socks5://a:1080, relaymesh://b:7000]\nfleet_secret: 0123456789abcdef"},
	}
	for _, tc := range good {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	bad := []struct{ name, yaml, want string }{
		{"relay without secret", "relay: ':7000'", "identity or fleet_secret: required with relay"},
		{"relaymesh hop without secret", "next: [relaymesh://a:7000]", "identity or fleet_secret: required with a relaymesh"},
		{"short secret", "relay: ':7000'\nfleet_secret: short-secret", "at least 16 bytes"},
		{"both secrets", "fleet_secret: 0123456789abcdef\nfleet_secret_file: /f", "set one, not both"},
		{"relaymesh with credentials", "next: [relaymesh://u:p@a:7000]\nfleet_secret: 0123456789abcdef", "take no user:password"},
		{"bad relay listen", "relay: nonsense\nfleet_secret: 0123456789abcdef", "relay:"},
	}
	for _, tc := range bad {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "short-secret") {
			t.Errorf("%s: the error echoes the secret: %v", tc.name, err)
		}
	}
}

func TestLoadFleetSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "fleet.key")
	if err := os.WriteFile(p, []byte("  0123456789abcdef-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{FleetSecretFile: p}
	got, err := c.LoadFleetSecret()
	if err != nil || string(got) != "0123456789abcdef-secret" {
		t.Fatalf("got %q, %v", got, err)
	}
	if err := os.WriteFile(p, []byte("tiny-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.LoadFleetSecret(); err == nil || strings.Contains(err.Error(), "tiny-secret") {
		t.Fatalf("short file secret: err = %v (want an error that does not echo it)", err)
	}
}

// Server.Chain gives every hop the client of its scheme, and a relaymesh://
// hop without the fleet secret is refused up front, naming the setting.
func TestChainHopsCarryTheirClients(t *testing.T) {
	cfg := Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "127.0.0.1:0", "", ""
	s, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Chain([]string{"socks5h://u:p@a:1080", "http://b:3128"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Hops) != 2 || ch.Hops[0].Client == nil || ch.Hops[1].Client == nil || ch.Hops[0].Name() != "socks5://a:1080" {
		t.Fatalf("hops %+v, want two with their clients", ch.Hops)
	}
	_, err = s.Chain([]string{"relaymesh://r:7000"})
	if want := "next hop relaymesh://r:7000: relaymesh:// hops need the fleet secret (fleet_secret_file)"; err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}
