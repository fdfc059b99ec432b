package shortlist

import (
	"reflect"
	"testing"
)

func TestRequestsGroupARelaysProbes(t *testing.T) {
	probes := []Probe{
		{From: "r1", To: "destination", Handshakes: 3}, // 0
		{From: "client", To: "r1", Handshakes: 3},      // 1
		{From: "r2", To: "r1", Handshakes: 3},          // 2
		{From: "r1", To: "r2", Handshakes: 3},          // 3
		{From: "client", To: "r2", Handshakes: 3},      // 4
		{From: "r1", To: "r3", Handshakes: 1},          // 5: another count, another request
		{From: "r1", To: "gone", Handshakes: 3},        // 6: unmakeable
		{From: "r1", To: "r4", Handshakes: 3},          // 7: past the limit of 2
	}
	got := Requests(probes, "client", 2, func(p Probe) bool { return p.To != "gone" })
	want := []Request{
		{From: "r1", Handshakes: 3, At: []int{0, 3}},
		{From: "client", Handshakes: 3, At: []int{1}},
		{From: "r2", Handshakes: 3, At: []int{2}},
		{From: "client", Handshakes: 3, At: []int{4}},
		{From: "r1", Handshakes: 1, At: []int{5}},
		{From: "r1", Handshakes: 3, At: []int{7}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Requests:\n got %+v\nwant %+v", got, want)
	}
	if n := len(Requests(probes, "client", 0, nil)); n != 5 {
		t.Fatalf("no limit, everything makeable: %d requests, want 5 (r1's 3-handshake probes in one)", n)
	}
}

// A request is awaited when any of its probes is: the round waits for the
// whole request, which answers once all its probes have.
func TestRequestsCarryAwaited(t *testing.T) {
	probes := []Probe{
		{From: "r1", To: "r2", Handshakes: 3},
		{From: "r1", To: "r3", Handshakes: 3, Awaited: true},
		{From: "client", To: "r1", Handshakes: 3, Awaited: true},
		{From: "client", To: "r2", Handshakes: 3},
	}
	got := Requests(probes, "client", 0, nil)
	want := []Request{
		{From: "r1", Handshakes: 3, At: []int{0, 1}, Awaited: true},
		{From: "client", Handshakes: 3, At: []int{2}, Awaited: true},
		{From: "client", Handshakes: 3, At: []int{3}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Requests:\n got %+v\nwant %+v", got, want)
	}
}
