// Package fleet reads and writes fleet files: the embedded default registry,
// a YAML list of the relays of one fleet and where to reach them.
//
//	admin_token: 5f0c...        # optional: the fleet's admin API token
//	relays:
//	  - name: r1            # unique; what chains and plans name
//	    region: osaka       # what `relayctl plan --dst` takes
//	    socks: 10.77.0.3:1080
//	    http: 10.77.0.3:8080
//	    admin: 10.77.0.3:9090
//	    relay: 10.77.0.3:7000
//
// configs/fleet.example.yaml documents every key.
package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"gopkg.in/yaml.v3"
)

// EnvFile names the environment variable relayctl reads for the default
// fleet file; `relayctl lab run` and `lab exec` set it to the lab's fleet.
const EnvFile = "RELAYMESH_FLEET"

// File is one fleet file.
type File struct {
	// AdminToken is the bearer token every relay's admin API accepts: relays
	// use it to pull each other's measurements, relayctl to read them. Keep
	// a fleet file with a token private (mode 0600).
	AdminToken string  `yaml:"admin_token,omitempty"`
	Relays     []Relay `yaml:"relays"`
}

// Relay returns the relay called name.
func (f *File) Relay(name string) (Relay, bool) {
	for _, r := range f.Relays {
		if r.Name == name {
			return r, true
		}
	}
	return Relay{}, false
}

// Relay is one relay of the fleet. Empty listen addresses mean the relay does
// not serve that front end.
type Relay struct {
	Name   string `yaml:"name"`
	Region string `yaml:"region,omitempty"`
	SOCKS  string `yaml:"socks,omitempty"`
	HTTP   string `yaml:"http,omitempty"`
	Admin  string `yaml:"admin,omitempty"`
	// Relay is the native protocol's relay listener (relayd's `relay:`):
	// what plans and route headers name. "": not a native hop.
	Relay string `yaml:"relay,omitempty"`
}

// Parse decodes a fleet file strictly (unknown keys are errors) and
// validates it.
func Parse(data []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return &f, f.Validate()
}

// Load reads and parses a fleet file.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Validate checks names are present and unique and addresses are host:port.
func (f *File) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, r := range f.Relays {
		field := fmt.Sprintf("relays[%d]", i)
		if r.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: required", field))
		} else if seen[r.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q listed twice", field, r.Name))
		}
		seen[r.Name] = true
		for _, a := range []struct{ key, v string }{{"socks", r.SOCKS}, {"http", r.HTTP}, {"admin", r.Admin}, {"relay", r.Relay}} {
			if a.v == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(a.v); err != nil {
				errs = append(errs, fmt.Errorf("%s.%s: %q is not host:port", field, a.key, a.v))
			}
		}
	}
	return errors.Join(errs...)
}

// Marshal encodes the file as YAML.
func (f *File) Marshal() ([]byte, error) { return yaml.Marshal(f) }
