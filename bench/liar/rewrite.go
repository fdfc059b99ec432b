package main

import (
	"encoding/json"
	"errors"
)

// The fields of a pair (/v1/measurements) and of a probe summary
// (/v1/probe) that are RTTs, milliseconds: what a liar scales.
var (
	pairRTTFields    = []string{"rtt_ms", "min_ms", "p90_ms", "jitter_ms"}
	summaryRTTFields = []string{"min_ms", "median_ms", "p90_ms", "jitter_ms"}
)

// rewriteMeasurements scales the RTTs of every pair with name as an end by
// factor and serves it as just measured (age_s 0): a reader takes the
// newest of the two ends' words on a pair. Other pairs (what relayd passes
// on of its peers) are left as they are.
func rewriteMeasurements(body []byte, name string, factor float64) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	pairs, _ := m["pairs"].([]any)
	for _, p := range pairs {
		pair, ok := p.(map[string]any)
		if !ok || (pair["from"] != name && pair["to"] != name) {
			continue
		}
		scale(pair, pairRTTFields, factor)
		pair["age_s"] = 0.0
	}
	return json.Marshal(m)
}

// rewriteProbe scales every summary of a /v1/probe answer from name (one
// forwarded to another relay, ?via=, is that relay's and left alone).
func rewriteProbe(body []byte, name string, factor float64) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m["from"] != name {
		if _, ok := m["from"].(string); !ok {
			return nil, errors.New("a probe answer without from")
		}
		return body, nil
	}
	if s, ok := m["summary"].(map[string]any); ok {
		scale(s, summaryRTTFields, factor)
	}
	results, _ := m["results"].([]any)
	for _, r := range results {
		if res, ok := r.(map[string]any); ok {
			if s, ok := res["summary"].(map[string]any); ok {
				scale(s, summaryRTTFields, factor)
			}
		}
	}
	return json.Marshal(m)
}

func scale(obj map[string]any, fields []string, factor float64) {
	for _, f := range fields {
		if v, ok := obj[f].(float64); ok {
			obj[f] = v * factor
		}
	}
}
