package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's layout table names every Go package of the tree (a row's
// path covers the packages under it), and names nothing that is gone.
func TestREADMELayoutMatchesTree(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var rows []string
	cell := regexp.MustCompile(`^\| ([^|]+) \|`)
	for _, line := range strings.Split(table, "\n") {
		m := cell.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, p := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1) {
			rows = append(rows, strings.TrimSuffix(p[1], "/"))
		}
	}
	if len(rows) < 10 {
		t.Fatalf("found %d paths in the layout table: the test no longer reads it", len(rows))
	}
	for _, r := range rows {
		if _, err := os.Stat(filepath.Join("..", r)); err != nil {
			t.Errorf("the layout table names %s, which is not in the tree", r)
		}
	}
	covered := func(dir string) bool {
		for _, r := range rows {
			if dir == r || strings.HasPrefix(dir, r+"/") {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			if base := d.Name(); rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") && dir != "." && !seen[dir] {
			seen[dir] = true
			if !covered(dir) {
				t.Errorf("package %s is not in the README's layout table", dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
