package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench/README.md is the index of the benchmarks: it names every
// bench/run-*.sh script, every experiment of the simulator's manifest and
// every entry directly under bench/results/
// (file or directory), and each of its relative links names a file or
// directory of the repository.
func TestBenchIndexListsEveryScript(t *testing.T) {
	data, err := os.ReadFile("../bench/README.md")
	if err != nil {
		t.Fatal(err)
	}
	index := string(data)

	scripts, err := filepath.Glob("../bench/run-*.sh")
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) < 10 {
		t.Fatalf("found %d bench/run-*.sh scripts: the test no longer finds them", len(scripts))
	}
	for _, s := range scripts {
		if name := filepath.Base(s); !strings.Contains(index, name) {
			t.Errorf("bench/README.md does not mention bench/%s", name)
		}
	}

	// The simulator's experiments are entries of one manifest, not
	// scripts: each is named, as its make target or in backquotes.
	manifest, err := os.ReadFile("../bench/sim-experiments.txt")
	if err != nil {
		t.Fatal(err)
	}
	experiments := 0
	for _, line := range strings.Split(string(manifest), "\n") {
		name, ok := strings.CutPrefix(line, "== ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, ":")
		name, _, _ = strings.Cut(name, " ")
		experiments++
		if !strings.Contains(index, "bench-sim-"+name+"`") && !strings.Contains(index, "`"+name+"`") {
			t.Errorf("bench/README.md does not name the simulator's experiment %s (bench/sim-experiments.txt)", name)
		}
	}
	if experiments < 10 {
		t.Fatalf("found %d experiments in bench/sim-experiments.txt: the test no longer reads them", experiments)
	}

	results, err := os.ReadDir("../bench/results")
	if err != nil {
		t.Fatal(err)
	}
	if len(results) < 10 {
		t.Fatalf("found %d entries under bench/results: the test no longer reads them", len(results))
	}
	for _, e := range results {
		if !strings.Contains(index, e.Name()) {
			t.Errorf("bench/README.md does not mention bench/results/%s", e.Name())
		}
	}

	n := 0
	for _, link := range markdownLinks(index) {
		if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
			continue
		}
		target, _, _ := strings.Cut(link, "#")
		if target == "" {
			continue
		}
		n++
		resolved := filepath.Join("../bench", filepath.FromSlash(target))
		if rel, err := filepath.Rel("..", resolved); err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("bench/README.md: %s points outside the repository", link)
			continue
		}
		if _, err := os.Stat(resolved); err != nil {
			t.Errorf("bench/README.md: %s: no such file or directory", link)
		}
	}
	if n < len(scripts) {
		t.Errorf("found %d relative links in bench/README.md, fewer than the %d scripts: the test no longer reads them", n, len(scripts))
	}
}
