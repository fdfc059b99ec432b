package planroute

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: a watch, survey or check that
// outlives its router is a leak a long-running relay would pile up.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
