package relay

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// freshProber is a prober whose every pair was measured the moment it is
// read, as a probe sample that lands while /v1/measurements is answering.
type freshProber struct{ self, peer string }

func (freshProber) Run(context.Context) {}

func (p freshProber) Snapshot() []registry.Pair {
	return []registry.Pair{{From: p.self, To: p.peer, RTTMs: 12.5, MinMs: 12.5, P90Ms: 12.5, Samples: 8, UpdatedAt: time.Now()}}
}

// The ages /v1/measurements serves are never negative, even for a figure
// that changed while the answer was made: a reader drops a negative age as
// a figure from the future, and with it a pair the relay measured all
// along (it went missing from the fleet until the next pull).
func TestServedMeasurementsNeverFromTheFuture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte("admin_token: tok\nrelays:\n  - {name: r3, admin: 127.0.0.1:1}\n  - {name: r2, admin: 127.0.0.1:1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(registry.Options{Fleet: path, Self: &registry.SelfRegistration{Name: "r3"}, Admin: adminapi.NewClient(time.Second, nil)})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{Name: "r3"}}
	s.measure = &measurer{self: "r3", reg: reg, probes: freshProber{"r3", "r2"}, loss: &s.peerLoss, rates: &s.learnt.Rates}
	for i := 0; i < 100; i++ {
		rec := httptest.NewRecorder()
		s.serveMeasurements(rec, httptest.NewRequest("GET", "/v1/measurements?scope=local", nil))
		var m registry.Measurements
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%v: %s", err, rec.Body)
		}
		if len(m.Pairs) != 1 || m.Pairs[0].AgeS < 0 {
			t.Fatalf("served %+v: want r3 -> r2 with an age of at least 0", m.Pairs)
		}
	}
}
