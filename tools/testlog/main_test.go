package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/go-test.json is `go test -json` of five packages: one that
// panics, one that does not build, one with passing, failing, skipped and
// parallel tests and "LAB RETRY" lines, one that passes, one without
// tests; and a line that is not an event.
const sample = "testdata/go-test.json"

func TestSummary(t *testing.T) {
	var out bytes.Buffer
	if err := summary(&out, []string{sample, "testdata/no-such-log.json"}); err != nil {
		t.Fatal(err)
	}
	want := `testdata/no-such-log.json: no such log (that phase did not run)
skipped tests (5):
  TestSkips (skipdemo): needs thing: line one
      line two
  TestSub/a/b_c (skipdemo): sub reason
  TestSkipNoMsg (skipdemo): (no reason given)
  TestLongSkip (skipdemo): first
      2
      3
      4
      5
      6
      ... 2 more lines in testdata/go-test.json
  TestPar2 (skipdemo): par skip
lab retries per test (3 in all):
  TestPar1: 2
  TestSub/ok: 1
`
	if out.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out.String(), want)
	}
}

// What go test prints without -v: ok and ? lines, build errors, and of a
// failed package its failed (or unfinished) tests' output and its own.
func TestShort(t *testing.T) {
	log, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sh := newShort(&out)
	for _, line := range bytes.SplitAfter(log, []byte("\n")) {
		sh.line(line)
	}
	sh.end()
	want := `    c_test.go:4: about to
panic: boom

goroutine 21 [running]:
skipdemo/crash.TestB.func1()
	/tmp/skipdemo/crash/c_test.go:4 +0x25
created by skipdemo/crash.TestB in goroutine 20
	/tmp/skipdemo/crash/c_test.go:4 +0x46
FAIL	skipdemo/crash	0.005s
# skipdemo/broken [skipdemo/broken.test]
broken/b_test.go:3:28: declared and not used: x
FAIL	skipdemo/broken [build failed]
ok  	skipdemo/pass	0.004s
?   	skipdemo/notests	[no test files]
stdout print
    a_test.go:10: bad
        second
--- FAIL: TestFail/x (0.00s)
--- FAIL: TestFail (0.00s)
FAIL
FAIL	skipdemo	0.009s
go: a line that is not an event
`
	if out.String() != want {
		t.Errorf("short:\n%s\nwant:\n%s", out.String(), want)
	}
}

// text is the -v output: every line of every event, in order.
func TestText(t *testing.T) {
	var out bytes.Buffer
	if err := text(&out, sample); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"=== RUN   TestSkips\n    a_test.go:5: before\n", "--- PASS: TestPar1 (0.00s)\n", "FAIL\tskipdemo/broken [build failed]\n", "go: a line that is not an event\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text has no %q:\n%s", want, out.String())
		}
	}
}

// run keeps the command's output in the log as it came and returns its
// exit status, printing go test's last FAIL line when it is not 0.
func TestRun(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log.json")
	var out bytes.Buffer
	if code := run(&out, log, []string{"sh", "-c", "cat " + sample + "; exit 3"}); code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	if !strings.HasSuffix(out.String(), "go: a line that is not an event\nFAIL\n") {
		t.Errorf("printed:\n%s\nwant go test's last FAIL line at the end", out.String())
	}
	got, err := os.ReadFile(log)
	want, _ := os.ReadFile(sample)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("log: %v, not the command's output", err)
	}
}
