// Package testenv is test support for tests that need something of the
// machine: root, a tool, a device, Docker, a Consul binary, IPv6.
//
// Such a test calls Need when what it needs is missing. Elsewhere it is
// skipped (and make test lists every skip and its reason at its end); in
// CI (CI=true) it fails, so a test that cannot run there cannot hide.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// Need stops the test because something it needs is missing here; the
// message (fmt.Sprintf(format, args...)) says what, and how to get it.
// Under CI=true the test fails with that message, elsewhere it is skipped.
func Need(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: a test that cannot run here fails instead of skipping)")
	}
	t.Skip(msg)
}
