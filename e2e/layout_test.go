package e2e

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// packageDirs are the directories of the tree that hold Go files (tests
// included: e2e/lab is a package of tests only), slash-separated and
// relative to the repository's root; tools/consul, a module of its own,
// is one of them.
func packageDirs(t *testing.T) map[string]bool {
	t.Helper()
	dirs := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
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
		if dir := filepath.ToSlash(filepath.Dir(rel)); strings.HasSuffix(rel, ".go") && dir != "." {
			dirs[dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// docs/architecture.md's package table names every Go package of the tree,
// one row each, and names nothing that is gone. The README points at it.
func TestArchitectureLayoutMatchesTree(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Packages\n")
	if !ok {
		t.Fatal("docs/architecture.md has no ## Packages section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := map[string]int{}
	firstCell := regexp.MustCompile(`^\| ([^|]+) \|`)
	path := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(table, "\n") {
		m := firstCell.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		paths := path.FindAllStringSubmatch(m[1], -1)
		switch {
		case len(paths) == 0:
			continue // the header row
		case len(paths) > 1:
			t.Errorf("docs/architecture.md: a row names %d packages (one row each): %s", len(paths), line)
		}
		for _, p := range paths {
			rows[strings.TrimSuffix(p[1], "/")]++
		}
	}
	if len(rows) < 10 {
		t.Fatalf("found %d packages in docs/architecture.md's table: the test no longer reads it", len(rows))
	}
	dirs := packageDirs(t)
	var missing, gone []string
	for dir := range dirs {
		if rows[dir] == 0 {
			missing = append(missing, dir)
		}
	}
	for r, n := range rows {
		if !dirs[r] {
			gone = append(gone, r)
		}
		if n > 1 {
			t.Errorf("docs/architecture.md lists %s %d times", r, n)
		}
	}
	sort.Strings(missing)
	sort.Strings(gone)
	for _, dir := range missing {
		t.Errorf("package %s is not in docs/architecture.md's package table", dir)
	}
	for _, r := range gone {
		t.Errorf("docs/architecture.md lists %s, which holds no Go package", r)
	}

	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "](docs/architecture.md") {
		t.Error("README.md does not link docs/architecture.md, where the layout is")
	}
}

// Every relative link in the README and docs/ names a file or directory of
// the repository, and a #fragment names a heading of the file it points at.
func TestDocLinksResolve(t *testing.T) {
	files := []string{"../README.md"}
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, docs...)
	n := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(file), "../")
		for _, link := range markdownLinks(string(data)) {
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			n++
			target, fragment, _ := strings.Cut(link, "#")
			target, _, _ = strings.Cut(target, "?")
			resolved := file
			if target != "" {
				resolved = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				rel, err := filepath.Rel("..", resolved)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: %s points outside the repository", name, link)
					continue
				}
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s: %s: no such file in the repository", name, link)
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			heads, err := headingAnchors(resolved)
			if err != nil {
				t.Errorf("%s: %s: %v", name, link, err)
			} else if !heads[fragment] {
				t.Errorf("%s: %s: no heading of %s has the anchor #%s", name, link, filepath.Base(resolved), fragment)
			}
		}
	}
	if n < 20 {
		t.Fatalf("found %d relative links in %v: the test no longer reads them", n, files)
	}
}

var (
	codeSpan     = regexp.MustCompile("`[^`\n]*`")
	inlineLink   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headingLine  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	fencedMarker = "```"
)

// markdownLinks returns the targets of a markdown text's inline links,
// leaving out fenced code blocks and code spans (whose text is no link).
func markdownLinks(text string) []string {
	var links []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), fencedMarker) {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "code")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, m[1])
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives a markdown file's
// headings: lower case, punctuation dropped, spaces as hyphens, and a
// repeated heading's anchor numbered (-1, -2, ...).
func headingAnchors(file string) (map[string]bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), fencedMarker) {
			fenced = !fenced
			continue
		}
		m := headingLine.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			anchors[a+"-"+strconv.Itoa(k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, nil
}

// relayd, the program that runs in production, links nothing of the lab's
// emulation or the simulator's model (docs/architecture.md says so).
func TestRelaydLinksNoLabOrSimulator(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/relayd").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/relayd: %v\n%s", err, out)
	}
	const module = "github.com/relaymesh/relaymesh/"
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, module+"pkg/lab") || strings.HasPrefix(p, module+"pkg/sim") {
			t.Errorf("relayd links %s", p)
		}
	}
}
