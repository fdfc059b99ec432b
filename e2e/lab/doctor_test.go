package lab_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/lab"
)

// TestLabDoctorUnderLoad: lab doctor's run under load brings up relays,
// moves a download through them beside a direct one, and judges the step
// by effect and by the strict bounds; the topologies are then judged
// against what held under load. One short rate each, not a calibration.
func TestLabDoctorUnderLoad(t *testing.T) {
	bins := labBins(t)
	cmd := exec.Command(filepath.Join(bins, "relayctl"), "lab", "doctor", "--rates", "100", "--load-rates", "50",
		"--duration", "2s", "--save", "", "--topologies", "../../configs/lab", "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lab doctor: %v\n%s", err, stderr.String())
	}
	t.Logf("lab doctor:\n%s", stderr.String())
	var got struct {
		Calibration lab.Calibration
		Topologies  []struct{ Name, Verdict string }
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("doctor json: %v\n%s", err, out)
	}
	steps := got.Calibration.UnderLoad
	if len(steps) == 0 {
		t.Fatalf("no step under load:\n%s", out)
	}
	s := steps[0]
	// 50 Mbit/s a link: both downloads near it (headers take 3.5 %), and
	// the engine carried five links' worth.
	if s.RateMbit != 50 || s.ChainMbit < 35 || s.ChainMbit > 50 || s.DirectMbit < 35 || s.DirectMbit > 50 || s.LinkMbit < 4*40 {
		t.Fatalf("step under load %+v: want both downloads at about 48 Mbit/s, %.0f+ Mbit/s summed over links", s, 4*40.0)
	}
	if s.Verdict == "" || !strings.Contains(stderr.String(), "under load, 5 links at") {
		t.Fatalf("step under load says nothing of its verdict: %+v\n%s", s, stderr.String())
	}
	if len(got.Topologies) == 0 {
		t.Fatal("no topology judged")
	}
}
