// Package buildinfo reports the version of the running binary.
package buildinfo

import "runtime/debug"

// version is set at link time: -ldflags "-X github.com/relaymesh/relaymesh/pkg/buildinfo.version=v1.2.3".
var version = ""

// Version returns the linked version, else the VCS revision Go embedded, else "dev".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return "dev-" + rev
		}
	}
	return "dev"
}
