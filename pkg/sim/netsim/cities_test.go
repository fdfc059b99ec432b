package netsim

import (
	"math"
	"testing"
)

func TestCityTable(t *testing.T) {
	if n := NumCities(); n < 150 || n > 250 {
		t.Fatalf("%d cities, want 150 to 250", n)
	}
	seen := map[string]bool{}
	var perRegion [numRegions]float64
	total := 0.0
	for i, c := range Cities() {
		if seen[c.Name] {
			t.Errorf("city %q listed twice", c.Name)
		}
		seen[c.Name] = true
		if c.LatDeg < -90 || c.LatDeg > 90 || c.LonDeg < -180 || c.LonDeg > 180 {
			t.Errorf("%s: position %v, %v out of range", c.Name, c.LatDeg, c.LonDeg)
		}
		for _, v := range []float64{c.LatDeg, c.LonDeg} {
			if r := v * 100; math.Abs(r-math.Round(r)) > 1e-6 {
				t.Errorf("%s: %v is not rounded to 0.01°", c.Name, v)
			}
		}
		if c.Weight <= 0 || c.Weight > 10 {
			t.Errorf("%s: weight %v, want (0, 10]", c.Name, c.Weight)
		}
		if len(c.Country) != 2 || c.Region >= numRegions {
			t.Errorf("%s: country %q region %v", c.Name, c.Country, c.Region)
		}
		if j, ok := CityIndex(c.Name); !ok || j != i {
			t.Errorf("CityIndex(%q) = %d, %v; want %d", c.Name, j, ok, i)
		}
		perRegion[c.Region] += c.Weight
		total += c.Weight
	}
	for r, w := range perRegion {
		if w == 0 {
			t.Errorf("region %v has no city", Region(r))
		}
	}
	// VPS offerings are concentrated in North America, Europe and East Asia.
	heavy := (perRegion[NorthAmerica] + perRegion[Europe] + perRegion[EastAsia] + perRegion[GreaterChina]) / total
	t.Logf("weight share: north america %.2f, europe %.2f, east asia + greater china %.2f, rest %.2f",
		perRegion[NorthAmerica]/total, perRegion[Europe]/total, (perRegion[EastAsia]+perRegion[GreaterChina])/total, 1-heavy)
	if heavy < 0.6 || heavy > 0.85 {
		t.Errorf("North America + Europe + East Asia hold %.2f of the weight, want 0.6 to 0.85", heavy)
	}
	if _, ok := CityIndex("Atlantis"); ok {
		t.Error("CityIndex found a city that is not in the table")
	}
}

func TestCityDistances(t *testing.T) {
	// Great-circle distances between city centres, as published (km).
	for _, c := range []struct {
		a, b string
		km   float64
	}{
		{"London", "New York", 5570},
		{"Frankfurt", "Amsterdam", 365},
		{"Sydney", "London", 16990},
		{"Tokyo", "Singapore", 5310},
		{"Sao Paulo", "Miami", 6560},
	} {
		a, _ := CityIndex(c.a)
		b, _ := CityIndex(c.b)
		if d := CityDistanceKm(a, b); math.Abs(d-c.km) > 0.01*c.km {
			t.Errorf("%s–%s: %.0f km, want %.0f ±1%%", c.a, c.b, d, c.km)
		}
		if d, e := CityDistanceKm(a, b), CityDistanceKm(b, a); d != e {
			t.Errorf("%s–%s: %v one way, %v the other", c.a, c.b, d, e)
		}
	}
}

func TestHubs(t *testing.T) {
	isHub := map[string]bool{}
	var hubRegions [numRegions]bool
	for _, h := range hubs {
		c, ok := CityIndex(h)
		if !ok {
			t.Fatalf("hub %q is not in the city table", h)
		}
		isHub[h] = true
		hubRegions[cities[c].Region] = true
	}
	for r, ok := range hubRegions {
		if !ok {
			t.Errorf("region %v has no hub", Region(r))
		}
	}
	for _, l := range hubLinks {
		if !isHub[l.a] || !isHub[l.b] {
			t.Errorf("link %s–%s: an end is not a hub", l.a, l.b)
			continue
		}
		a, _ := CityIndex(l.a)
		b, _ := CityIndex(l.b)
		if cities[a].Region == cities[b].Region {
			t.Errorf("link %s–%s is within one region: the model prices those itself", l.a, l.b)
		}
		// A link is never faster than light in fibre on the great circle.
		if floor := 2 * CityDistanceKm(a, b) / 200; l.ms < floor {
			t.Errorf("link %s–%s: %v ms, below the great circle's %.0f ms", l.a, l.b, l.ms, floor)
		}
	}
}
