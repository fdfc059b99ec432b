package adminapi

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: a tunnel, pool, dial or watch that
// outlives its test is a leak a long-running relay would pile up.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
