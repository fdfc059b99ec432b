package relay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// Check names every problem, not the first: a config wrong in five
// independent ways gets five errors, each naming its key.
func TestCheckNamesEveryProblem(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "token")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.Limits.MaxConns = -1                                   // Validate
	cfg.Auth.CredentialsFile = filepath.Join(dir, "missing")   // a file that is not there
	cfg.FleetSecretFile = filepath.Join(dir, "missing-secret") // another
	cfg.AdminTokenFile = short                                 // a token too short
	cfg.SOCKS = "192.0.2.1:1080"                               // TEST-NET-1: no interface has it
	_, err := Check(cfg, false)
	if err == nil {
		t.Fatal("Check passed a config wrong five ways")
	}
	for _, want := range []string{"limits.max_conns", "auth.credentials_file", "fleet_secret_file", "admin_token_file", "socks: 192.0.2.1:1080: no interface"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check's error does not name %s:\n%v", want, err)
		}
	}
	// One path: New refuses with the very same problems.
	if _, nerr := New(cfg, zap.NewNop()); nerr == nil || nerr.Error() != err.Error() {
		t.Errorf("New and Check disagree:\nNew:   %v\nCheck: %v", nerr, err)
	}
}

// The defaults pass, and a secret file others may read is a warning, not
// a problem (run warns and starts).
func TestCheckDefaultsAndWarnings(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w, err := Check(Defaults(), false); err != nil || len(w) != 0 {
		t.Fatalf("defaults: warnings %q, error %v", w, err)
	}
	cfg := Defaults()
	cfg.FleetSecretFile = secret
	w, err := Check(cfg, false)
	if err != nil || len(w) != 1 || !strings.Contains(w[0], "secret file exposed: fleet_secret_file "+secret) {
		t.Fatalf("exposed secret: warnings %q, error %v", w, err)
	}
}
