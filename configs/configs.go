// Package configs carries the shipped lab topologies inside the binaries, so
// `relayctl lab run -t world` works from any directory. The files stay in
// configs/lab/ for reading and copying.
package configs

import (
	"embed"
	"io/fs"
	"path"
	"slices"
	"strings"
)

//go:embed lab/*.yaml
var labFiles embed.FS

// LabTopology returns the shipped topology file named name ("world" or
// "world.yaml"); ok is false when there is none.
func LabTopology(name string) (data []byte, ok bool) {
	name = strings.TrimSuffix(name, ".yaml")
	if name == "" || strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	data, err := labFiles.ReadFile(path.Join("lab", name+".yaml"))
	return data, err == nil
}

// LabTopologies lists the shipped topologies' names, sorted.
func LabTopologies() []string {
	entries, _ := fs.ReadDir(labFiles, "lab")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(names)
	return names
}
