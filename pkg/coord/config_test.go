package coord

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

func TestWithDefaults(t *testing.T) {
	c, err := Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.ProbesPerMinute != 12 || c.Nearest != 12 || c.Random != 1 || c.RotateEvery != 5*time.Minute ||
		c.Window != 8 || c.MaxAge != 10*time.Minute || c.Vivaldi == nil || c.Vivaldi.Dimensionality != 8 {
		t.Errorf("defaults: %+v", c)
	}
	if got := c.Interval(); got != 5*time.Second {
		t.Errorf("Interval %v, want 5s", got)
	}

	// The caller's Vivaldi config is copied, not shared.
	v := coordinate.DefaultConfig()
	v.Dimensionality = 3
	c, err = Config{ProbesPerMinute: 30, Vivaldi: v}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	v.Dimensionality = 5
	if c.Vivaldi.Dimensionality != 3 || c.Interval() != 2*time.Second {
		t.Errorf("got dimensionality %d interval %v, want 3 and 2s", c.Vivaldi.Dimensionality, c.Interval())
	}
}

func TestWithDefaultsErrorsNameTheField(t *testing.T) {
	viv := func(f func(*coordinate.Config)) *coordinate.Config {
		v := coordinate.DefaultConfig()
		f(v)
		return v
	}
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"ProbesPerMinute", Config{ProbesPerMinute: -1}},
		{"ProbesPerMinute", Config{ProbesPerMinute: 60001}},
		{"Nearest", Config{Nearest: -1}},
		{"Random", Config{Random: -2}},
		{"Window", Config{Window: -1}},
		{"RotateEvery", Config{RotateEvery: -time.Second}},
		{"MaxAge", Config{MaxAge: -time.Second}},
		// 12 peers at 5 s each take a minute: results must outlive that.
		{"MaxAge", Config{MaxAge: 59 * time.Second}},
		{"Vivaldi.Dimensionality", Config{Vivaldi: viv(func(v *coordinate.Config) { v.Dimensionality = 0 })}},
		{"Vivaldi.VivaldiErrorMax", Config{Vivaldi: viv(func(v *coordinate.Config) { v.VivaldiErrorMax = 0 })}},
		{"Vivaldi.VivaldiCE", Config{Vivaldi: viv(func(v *coordinate.Config) { v.VivaldiCE = 1.5 })}},
		{"Vivaldi.VivaldiCC", Config{Vivaldi: viv(func(v *coordinate.Config) { v.VivaldiCC = 0 })}},
		{"Vivaldi.HeightMin", Config{Vivaldi: viv(func(v *coordinate.Config) { v.HeightMin = -1 })}},
		{"Vivaldi.LatencyFilterSize", Config{Vivaldi: viv(func(v *coordinate.Config) { v.LatencyFilterSize = 0 })}},
		{"Vivaldi.GravityRho", Config{Vivaldi: viv(func(v *coordinate.Config) { v.GravityRho = 0 })}},
	} {
		_, err := tc.cfg.WithDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.field+" ") {
			t.Errorf("%s: error %v, want one naming %s", tc.field, err, tc.field)
		}
	}
	if _, err := (Config{MaxAge: 65 * time.Second}).WithDefaults(); err != nil {
		t.Errorf("MaxAge of exactly one cycle: %v", err)
	}
}

// A relay reads every relay's coordinate 0.6 s a relay apart, from 10 s to
// 10 minutes.
func TestFleetViewEvery(t *testing.T) {
	for relays, want := range map[int]time.Duration{0: 10 * time.Second, 10: 10 * time.Second, 100: time.Minute, 500: 5 * time.Minute, 1000: 10 * time.Minute, 5000: 10 * time.Minute} {
		if got := FleetViewEvery(relays); got != want {
			t.Errorf("FleetViewEvery(%d) = %v, want %v", relays, got, want)
		}
	}
}
