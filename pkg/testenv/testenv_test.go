package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Need skips outside CI and fails under CI=true, saying why. The test runs
// itself as a child with each setting of $CI.
func TestNeed(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		Need(t, "needs %s: install it", "a thing")
		return
	}
	for _, c := range []struct {
		ci, want string
		fails    bool
	}{
		{"", "--- SKIP: TestNeed", false},
		{"false", "--- SKIP: TestNeed", false},
		{"true", "--- FAIL: TestNeed", true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNeed$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+c.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.fails || !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "needs a thing: install it") {
			t.Errorf("CI=%q: %v, want %s:\n%s", c.ci, err, c.want, out)
		}
		if c.fails && !strings.Contains(string(out), "(CI=true: a test that cannot run here fails instead of skipping)") {
			t.Errorf("CI=true: the failure does not say why it is not a skip:\n%s", out)
		}
	}
}
