package relay

import (
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// Every test leaves no goroutine behind: a tunnel, pool, dial or watch that
// outlives its test is a leak a long-running relay would pile up.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startServer is a relay of cfg, started, and shut down when the test
// ends; each of setup runs between New and Start (a router or a dialer
// set before anything listens).
func startServer(t *testing.T, cfg Config, setup ...func(*Server)) *Server {
	t.Helper()
	s, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(s)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(time.Second) })
	return s
}
