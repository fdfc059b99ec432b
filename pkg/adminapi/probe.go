package adminapi

import "github.com/relaymesh/relaymesh/pkg/probe"

// ProbeResult is one target's answer in /v1/probe's results: its summary,
// or why it has none (refused by the relay's destination policy,
// unresolved, not host:port).
type ProbeResult struct {
	Target  string         `json:"target"`
	Addr    string         `json:"addr,omitempty"` // the address connected to
	Summary *probe.Summary `json:"summary,omitempty"`
	Error   string         `json:"error,omitempty"`
}

// ProbeAnswer is what /v1/probe answers: a result per target, in order;
// with one target measured, that target's Target, Addr and Summary at the
// top too (as before results existed); with info=1, the relay's Info.
//
// The fields are in the order of their JSON keys: the answer was a map,
// encoded with its keys sorted, and this order keeps its bytes.
type ProbeAnswer struct {
	Addr    string         `json:"addr,omitempty"`
	From    string         `json:"from"` // the relay's name
	Info    *Info          `json:"info,omitempty"`
	Results []ProbeResult  `json:"results"`
	Summary *probe.Summary `json:"summary,omitempty"`
	Target  string         `json:"target,omitempty"`
}
