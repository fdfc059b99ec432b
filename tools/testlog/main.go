// Command testlog keeps make test's `go test -json` logs and reads them back:
// what go test prints without -v, the -v text, and at the end the list of
// every skipped test with its reason and the lab's retries per test, so a
// skip is never lost in a log.
//
//	testlog run LOG CMD [ARG...]   run CMD (a `go test -json ...`), write its
//	                               JSON to LOG, print what go test prints
//	                               without -v; exit with CMD's status
//	testlog text LOG               print LOG as `go test -v` prints it
//	testlog summary LOG...         the skipped tests and their reasons, and
//	                               the "LAB RETRY <test>" lines per test
//
// A LOG that does not exist in summary is a phase that did not run: said,
// and not an error.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strings"
)

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	switch args := os.Args[2:]; os.Args[1] {
	case "run":
		if len(args) < 2 {
			usage()
		}
		os.Exit(run(os.Stdout, args[0], args[1:]))
	case "text":
		if len(args) != 1 {
			usage()
		}
		if err := text(os.Stdout, args[0]); err != nil {
			fail(err)
		}
	case "summary":
		if err := summary(os.Stdout, args); err != nil {
			fail(err)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testlog run LOG CMD [ARG...] | testlog text LOG | testlog summary LOG...")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "testlog:", err)
	os.Exit(1)
}

// event is one line of `go test -json` (cmd/test2json), the fields read.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// parse reads one line of the log; ok is false for a line that is not an
// event (the go command's own messages on stderr, kept in the log as they
// came).
func parse(line []byte) (e event, ok bool) {
	if len(bytes.TrimSpace(line)) == 0 || line[0] != '{' {
		return e, false
	}
	if json.Unmarshal(line, &e) != nil || e.Action == "" {
		return e, false
	}
	return e, true
}

// eachLine calls fn with every line of r, the last one even without a
// newline; lines may be long (a test's output line).
func eachLine(r io.Reader, fn func([]byte) error) error {
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if ferr := fn(line); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// run runs argv, tees its standard output (go test -json) to logPath and
// prints it to w as go test prints without -v; its standard error goes to
// ours. It returns argv's exit status.
func run(w io.Writer, logPath string, argv []string) int {
	f, err := os.Create(logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		return 1
	}
	defer f.Close()
	// ^C reaches go test too (the same process group): let it end, then
	// print what it wrote. (Caught, not ignored: go test would inherit
	// an ignored signal.)
	signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		return 1
	}
	out := bufio.NewWriter(w)
	sh := newShort(out)
	var logErr error
	readErr := eachLine(stdout, func(line []byte) error {
		if _, err := f.Write(line); err != nil && logErr == nil {
			logErr = err
		}
		sh.line(line)
		_ = out.Flush() // and read on whatever happens to our output: go test must not block
		return nil
	})
	werr := cmd.Wait()
	sh.end()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(werr, &exit):
		code = exit.ExitCode()
		if code < 0 { // killed by a signal
			code = 1
		}
	case werr != nil:
		fmt.Fprintln(out, "testlog:", werr)
		code = 1
	}
	if code != 0 {
		fmt.Fprintln(out, "FAIL") // go test's own last line when anything failed
	}
	for _, err := range []error{readErr, logErr} {
		if err != nil {
			fmt.Fprintln(out, "testlog:", err)
			code = max(code, 1)
		}
	}
	_ = out.Flush()
	return code
}

// short prints a stream of events as go test prints without -v: per
// package, when it ends, its "ok" (or "?") line, or, when it failed, the
// output of its failed tests and its own (a panic, FAIL lines); build
// errors as they come. Lines that are not events are printed as they are.
type short struct {
	w    io.Writer
	pkgs map[string]*pkgOut
}

// pkgOut is one package's output so far and how its tests ended.
type pkgOut struct {
	out   []event
	ended map[string]string // test -> pass, fail or skip
}

func newShort(w io.Writer) *short { return &short{w: w, pkgs: map[string]*pkgOut{}} }

func (s *short) line(line []byte) {
	e, ok := parse(line)
	if !ok {
		_, _ = s.w.Write(line)
		return
	}
	if e.Action == "build-output" {
		fmt.Fprint(s.w, e.Output)
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkgs[e.Package]
	if p == nil {
		p = &pkgOut{ended: map[string]string{}}
		s.pkgs[e.Package] = p
	}
	switch e.Action {
	case "output":
		p.out = append(p.out, e)
	case "pass", "fail", "skip":
		if e.Test != "" {
			p.ended[e.Test] = e.Action
			return
		}
		s.print(p, e.Action == "fail")
		delete(s.pkgs, e.Package)
	}
}

// end prints the packages that never ended (go test was killed) as failed.
func (s *short) end() {
	names := make([]string, 0, len(s.pkgs))
	for name := range s.pkgs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		s.print(s.pkgs[name], true)
	}
	clear(s.pkgs)
}

func (s *short) print(p *pkgOut, failed bool) {
	for _, e := range p.out {
		switch {
		case e.Test == "" && !failed:
			if e.Output != "PASS\n" && e.Output != "testing: warning: no tests to run\n" {
				fmt.Fprint(s.w, e.Output) // ok, ?
			}
		case strings.HasPrefix(e.Output, "=== "): // RUN, PAUSE, CONT, NAME: -v only
		case e.Test == "" || failed && p.ended[e.Test] != "pass" && p.ended[e.Test] != "skip":
			// A failed package's own output, and that of its tests that
			// failed or never ended (a panic ends none).
			fmt.Fprint(s.w, e.Output)
		}
	}
}

// text prints a log as go test -v printed it: every event's output, and
// what is not an event as it is.
func text(w io.Writer, logPath string) error {
	f, err := os.Open(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriter(w)
	err = eachLine(f, func(line []byte) error {
		if e, ok := parse(line); ok {
			_, err := bw.WriteString(e.Output)
			return err
		}
		_, err := bw.Write(line)
		return err
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// A test's log line (t.Log, t.Skip: "    file.go:12: message"), and the
// lines that continue a message over more than one line (8 spaces).
var (
	logLine      = regexp.MustCompile(`^ {4}[^ ]+\.go:\d+: (.*)$`)
	continuation = regexp.MustCompile(`^ {8}(.*)$`)
	labRetry     = regexp.MustCompile(`LAB RETRY (\S+)`)
)

// maxReasonLines is how many lines of a skip's reason the summary shows.
const maxReasonLines = 6

type skipped struct {
	test, pkg, log string
	reason         []string
}

// summary prints the skipped tests of the logs, each with its package and
// the reason (its last log message before it ended: the skip's), and how
// many "LAB RETRY <test>" lines each test logged.
func summary(w io.Writer, logs []string) error {
	var skips []skipped
	var notRun []string
	retries := map[string]int{}
	for _, path := range logs {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			notRun = append(notRun, path)
			continue
		}
		if err != nil {
			return err
		}
		last := map[[2]string][]string{} // package, test -> its last log message
		err = eachLine(f, func(line []byte) error {
			e, ok := parse(line)
			if !ok || e.Test == "" {
				return nil
			}
			key := [2]string{e.Package, e.Test}
			switch e.Action {
			case "output":
				out := strings.TrimRight(e.Output, "\n")
				if m := logLine.FindStringSubmatch(out); m != nil {
					last[key] = []string{m[1]}
					if r := labRetry.FindStringSubmatch(m[1]); r != nil {
						retries[strings.TrimSuffix(r[1], ":")]++
					}
				} else if m := continuation.FindStringSubmatch(out); m != nil && last[key] != nil {
					last[key] = append(last[key], m[1])
				}
			case "skip":
				skips = append(skips, skipped{test: e.Test, pkg: e.Package, log: path, reason: last[key]})
				delete(last, key)
			case "pass", "fail":
				delete(last, key)
			}
			return nil
		})
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	bw := bufio.NewWriter(w)
	for _, path := range notRun {
		fmt.Fprintf(bw, "%s: no such log (that phase did not run)\n", path)
	}
	fmt.Fprintf(bw, "skipped tests (%d):\n", len(skips))
	for _, s := range skips {
		reason := s.reason
		if len(reason) == 0 {
			reason = []string{"(no reason given)"}
		}
		fmt.Fprintf(bw, "  %s (%s): %s\n", s.test, s.pkg, reason[0])
		shown := reason[1:min(len(reason), maxReasonLines)]
		for _, l := range shown {
			fmt.Fprintf(bw, "      %s\n", l)
		}
		if more := len(reason) - 1 - len(shown); more > 0 {
			fmt.Fprintf(bw, "      ... %d more lines in %s\n", more, s.log)
		}
	}
	if len(retries) == 0 {
		fmt.Fprintln(bw, "lab retries per test: none")
	} else {
		names := make([]string, 0, len(retries))
		total := 0
		for name, n := range retries {
			names = append(names, name)
			total += n
		}
		slices.Sort(names)
		fmt.Fprintf(bw, "lab retries per test (%d in all):\n", total)
		for _, name := range names {
			fmt.Fprintf(bw, "  %s: %d\n", name, retries[name])
		}
	}
	return bw.Flush()
}
