package netsim

import (
	"math"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	d := Defaults()
	if err := d.Validate(); err != nil {
		t.Fatalf("Defaults: %v", err)
	}
	if got := (Config{}).WithDefaults(); got != d {
		t.Errorf("zero Config.WithDefaults() = %+v, want Defaults() %+v", got, d)
	}
	c := Config{Relays: 7, BadRouteShare: -1, JoinPerHour: 2}.WithDefaults()
	if c.Relays != 7 || c.BadRouteShare != -1 || c.JoinPerHour != 2 || c.Providers != d.Providers {
		t.Errorf("WithDefaults changed a set field or missed a zero one: %+v", c)
	}
	if c.WithDefaults() != c {
		t.Error("WithDefaults is not idempotent")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		field string
		cfg   Config
	}{
		{"Relays", Config{Relays: MaxRelays + 1}},
		{"Relays", Config{Relays: -1}},
		{"Providers", Config{Providers: -3}},
		{"EndpointISPs", Config{EndpointISPs: -1}},
		{"RelayAccessMs", Config{RelayAccessMs: 0.1}},
		{"EndpointAccessMs", Config{EndpointAccessMs: 100}},
		{"FibreKmPerMs", Config{FibreKmPerMs: 400}},
		{"InflationLong", Config{InflationLong: 0.5, InflationShort: 2}},
		{"InflationShort", Config{InflationShort: 1.1, InflationLong: 1.5}},
		{"InflationScaleKm", Config{InflationScaleKm: -5}},
		{"CityPairSigma", Config{CityPairSigma: math.NaN()}},
		{"RouteSigma", Config{RouteSigma: math.Inf(1)}},
		{"SameProviderFactor", Config{SameProviderFactor: 1.5}},
		{"SameProviderFactor", Config{SameProviderFactor: -1}},
		{"BadRouteShare", Config{BadRouteShare: 2}},
		{"BadRouteMinMs", Config{BadRouteMinMs: 200}},
		{"JitterFrac", Config{JitterFrac: 11}},
		{"LossMax", Config{LossMax: 1.5}},
		{"JoinPerHour", Config{JoinPerHour: -1}},
		{"LeavePerHour", Config{LeavePerHour: math.NaN()}},
		{"FailPerHour", Config{FailPerHour: -0.1}},
		{"InitialDownShare", Config{InitialDownShare: 1.5}},
	} {
		err := c.cfg.Validate()
		if err == nil {
			t.Errorf("%+v: no error, want one naming %s", c.cfg, c.field)
			continue
		}
		if !strings.Contains(err.Error(), c.field+" = ") {
			t.Errorf("error %q does not name %s", err, c.field)
		}
		if w, err2 := NewWorld(c.cfg, 1); w != nil || err2 == nil {
			t.Errorf("NewWorld accepted %+v", c.cfg)
		}
	}
	for _, n := range []int{1, 2, MaxRelays} {
		if w, err := NewWorld(Config{Relays: n}, 1); err != nil || w.NumRelays() != n {
			t.Errorf("NewWorld with %d relays: %v", n, err)
		}
	}
}
