package buildinfo

import "testing"

func TestDescribe(t *testing.T) {
	rev := "1d0be53c9745b45eef8c0d0a9c675037a159ed19"
	for _, c := range []struct {
		linked string
		v      vcs
		want   string
	}{
		{"v1.2.3", vcs{revision: rev, time: "2026-12-06T05:31:18Z"}, "v1.2.3 go1.27.3"},
		{"", vcs{revision: rev, time: "2026-12-06T05:31:18Z"}, "dev-1d0be53c9745 (2026-12-06T05:31:18Z) go1.27.3"},
		{"", vcs{revision: rev, time: "2026-12-06T05:31:18Z", modified: true}, "dev-1d0be53c9745-dirty (2026-12-06T05:31:18Z) go1.27.3"},
		{"", vcs{}, "dev go1.27.3"},
	} {
		if got := describe(c.linked, c.v, "go1.27.3"); got != c.want {
			t.Errorf("describe(%q, %+v) = %q, want %q", c.linked, c.v, got, c.want)
		}
	}
}
