package relay

import (
	"strings"
	"testing"
)

func TestConnBudget(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		udp   int
		want  int
	}{
		{0, 256, 0}, // unknown: no bound
		{20000, 256, (20000 - reservedFDs - 256) / 2}, // the reserve
		{1024, 256, (1024 - 256) / 2},                 // a quarter of a small limit
		{128, 256, (128 - 32) / 2},
		{2, 0, 1}, // at least one
	} {
		if got := connBudget(tc.limit, tc.udp); got != tc.want {
			t.Errorf("connBudget(%d, %d) = %d, want %d", tc.limit, tc.udp, got, tc.want)
		}
	}
}

// Unset pools follow the budget; a set one stays, warned about when the
// budget cannot hold it.
func TestDeriveConnLimits(t *testing.T) {
	var p preflight
	l := Limits{MaxConns: 0, MaxRelayConns: 50}
	p.deriveConnLimits(&l, 9000, 20000)
	if l.MaxConns != 9000 || l.MaxRelayConns != 50 || len(p.warnings) != 0 {
		t.Fatalf("limits %+v, warnings %q", l, p.warnings)
	}
	l = Limits{MaxConns: 10000, MaxRelayConns: 0}
	p.deriveConnLimits(&l, 9000, 20000)
	if l.MaxConns != 10000 || l.MaxRelayConns != 9000 || len(p.warnings) != 1 || !strings.Contains(p.warnings[0], "limits.max_conns is 10000") {
		t.Fatalf("limits %+v, warnings %q", l, p.warnings)
	}
	l = Limits{}
	p.deriveConnLimits(&l, 0, 0)
	if l.MaxConns != fallbackMaxConns || l.MaxRelayConns != fallbackMaxConns {
		t.Fatalf("with no file limit known: %+v", l)
	}
}
