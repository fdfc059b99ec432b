// Package buildinfo reports the version of the running binary.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// version is set at link time: -ldflags "-X github.com/relaymesh/relaymesh/pkg/buildinfo.version=v1.2.3".
var version = ""

// vcs is the commit Go embedded in the binary (go build -buildvcs, which
// make build turns on where git works): zero outside a checkout, or with
// -buildvcs=false.
type vcs struct {
	revision string // full hash
	time     string // the commit's time, RFC 3339
	modified bool   // built from a tree with uncommitted changes
}

func readVCS() vcs {
	var v vcs
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.revision = s.Value
		case "vcs.time":
			v.time = s.Value
		case "vcs.modified":
			v.modified = s.Value == "true"
		}
	}
	return v
}

// Version returns the linked version, else dev-<the commit's first 12 hex
// digits>[-dirty] from the VCS revision Go embedded, else "dev".
func Version() string {
	if version != "" {
		return version
	}
	return devVersion(readVCS())
}

func devVersion(v vcs) string {
	if v.revision == "" {
		return "dev"
	}
	rev := v.revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if v.modified {
		rev += "-dirty"
	}
	return "dev-" + rev
}

// Describe is the line --version prints after the program's name: the
// version, the commit's time when no release version was linked (a dev
// build says when its code was committed), and the Go version, e.g.
// "dev-1d0be53c9745 (2026-12-06T05:31:18Z) go1.26.8".
func Describe() string {
	return describe(version, readVCS(), runtime.Version())
}

func describe(linked string, v vcs, goVersion string) string {
	if linked != "" {
		return linked + " " + goVersion
	}
	s := devVersion(v)
	if v.time != "" {
		s += " (" + v.time + ")"
	}
	return s + " " + goVersion
}
