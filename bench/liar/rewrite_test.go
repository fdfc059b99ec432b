package main

import (
	"encoding/json"
	"testing"
)

func TestRewriteMeasurementsScalesOnlyTheLiarsPairs(t *testing.T) {
	in := `{"relay":"mumbai","pairs":[
		{"from":"mumbai","to":"tokyo","rtt_ms":125,"min_ms":124,"p90_ms":127,"jitter_ms":2,"age_s":3.5},
		{"from":"tokyo","to":"mumbai","rtt_ms":126,"min_ms":125,"p90_ms":128,"jitter_ms":2,"age_s":1},
		{"from":"tokyo","to":"oregon","rtt_ms":100,"min_ms":99,"p90_ms":101,"jitter_ms":1,"age_s":2}]}`
	out, err := rewriteMeasurements([]byte(in), "mumbai", 0.5)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Pairs []struct {
			From, To string
			RTTMs    float64 `json:"rtt_ms"`
			MinMs    float64 `json:"min_ms"`
			AgeS     float64 `json:"age_s"`
		}
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	want := []struct{ rtt, min, age float64 }{{62.5, 62, 0}, {63, 62.5, 0}, {100, 99, 2}}
	for i, w := range want {
		p := m.Pairs[i]
		if p.RTTMs != w.rtt || p.MinMs != w.min || p.AgeS != w.age {
			t.Errorf("pair %s->%s: rtt %v min %v age %v, want %v %v %v", p.From, p.To, p.RTTMs, p.MinMs, p.AgeS, w.rtt, w.min, w.age)
		}
	}
}

func TestRewriteProbeScalesEverySummaryOfTheLiar(t *testing.T) {
	in := `{"from":"mumbai","target":"srv-tokyo:8000","summary":{"median_ms":127,"min_ms":126},
		"results":[{"target":"srv-tokyo:8000","summary":{"median_ms":127,"min_ms":126}},{"target":"x:1","error":"refused"}],
		"info":{"name":"mumbai","capacity_bps":0}}`
	factor := 0.2
	out, err := rewriteProbe([]byte(in), "mumbai", factor)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Summary struct {
			MedianMs float64 `json:"median_ms"`
		}
		Results []struct {
			Summary *struct {
				MedianMs float64 `json:"median_ms"`
			}
			Error string
		}
		Info map[string]any
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if want := 127 * factor; m.Summary.MedianMs != want || m.Results[0].Summary.MedianMs != want {
		t.Errorf("medians %v, %v: want %v", m.Summary.MedianMs, m.Results[0].Summary.MedianMs, want)
	}
	if m.Results[1].Error != "refused" || m.Info["name"] != "mumbai" {
		t.Errorf("what is not an RTT changed: %s", out)
	}
	// Another relay's answer, forwarded through the liar, is left alone.
	other := `{"from":"tokyo","summary":{"median_ms":10}}`
	if out, err := rewriteProbe([]byte(other), "mumbai", 0.2); err != nil || string(out) != other {
		t.Errorf("forwarded answer rewritten: %s, %v", out, err)
	}
}
