package lab

import (
	"strings"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

// TestVerdictSummary: a verdict names its check, the worst link and every
// problem, valid or not.
func TestVerdictSummary(t *testing.T) {
	v := Verdict{Check: DefaultCheck, Valid: true, Worst: 1, Links: []LinkVerdict{
		{Between: [2]string{"client", "r1"}, Effect: wanemu.LinkEffect{RTTNs: 25e6, Moves: 0.001}},
		{Between: [2]string{"r1", "server"}, Effect: wanemu.LinkEffect{RTTNs: 25e6, MeanShare: 0.012, Moves: 0.012}},
	}}
	s := v.Summary()
	for _, want := range []string{"self-check valid", "tolerance 15 %", "5.0 %", "worst link r1-server", "1.20 %"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	v.Valid, v.Problems = false, []string{"link r1-server: a stall"}
	if s := v.Summary(); !strings.Contains(s, "FAILED") || !strings.Contains(s, "link r1-server: a stall") {
		t.Errorf("invalid summary:\n%s", s)
	}
	if s := (Check{Strict: true}).String(); !strings.Contains(s, "0.5 ms") || !strings.Contains(s, "20 ms") {
		t.Errorf("strict check: %s", s)
	}
}
