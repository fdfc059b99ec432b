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
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is one fleet file.
type File struct {
	// AdminToken is the bearer token every relay's admin API accepts: relays
	// use it to pull each other's measurements, relayctl to read them. Keep
	// a fleet file with a token private (mode 0600).
	AdminToken string  `yaml:"admin_token,omitempty"`
	Relays     []Relay `yaml:"relays"`
	// Skipped holds one error per relay entry that was left out (unknown
	// key, no name, a name listed twice, an address that is not host:port),
	// each naming the entry. The rest of the file is in Relays: one typo
	// must not take a running fleet's other relays away.
	Skipped []error `yaml:"-"`
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

// Parse decodes a fleet file. The file as a whole is strict: YAML that
// does not parse, or an unknown top-level key, is an error. Each relay entry
// is checked on its own (unknown keys, name present and unique, addresses
// host:port): a bad entry is left out and recorded in Skipped, and the
// others are kept. Check Skipped (or Problems) after every Parse.
func Parse(data []byte) (*File, error) {
	var doc struct {
		AdminToken string      `yaml:"admin_token"`
		Relays     []yaml.Node `yaml:"relays"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	f := &File{AdminToken: doc.AdminToken}
	first := map[string]int{} // name -> index of the entry that holds it
	for i := range doc.Relays {
		r, err := parseRelay(&doc.Relays[i])
		if err == nil && r.Name != "" {
			if j, dup := first[r.Name]; dup {
				err = fmt.Errorf("name %q is already used by relays[%d]", r.Name, j)
			}
		}
		if err != nil {
			f.Skipped = append(f.Skipped, fmt.Errorf("%s: %w; entry skipped", entryName(i, &doc.Relays[i], r.Name), err))
			continue
		}
		first[r.Name] = i
		f.Relays = append(f.Relays, r)
	}
	return f, nil
}

// parseRelay decodes and checks one entry of relays. Node.Decode has no
// strict mode, so unknown keys are checked here, against Relay's yaml tags.
func parseRelay(n *yaml.Node) (Relay, error) {
	var r Relay
	if err := n.Decode(&r); err != nil {
		// yaml's messages start "line N: "; entryName gives the line already.
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msgs := make([]string, len(te.Errors))
			for k, msg := range te.Errors {
				if _, after, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
					msg = after
				}
				msgs[k] = msg
			}
			return r, errors.New(strings.Join(msgs, "; "))
		}
		return r, err
	}
	m := n
	for m.Kind == yaml.AliasNode && m.Alias != nil {
		m = m.Alias
	}
	if m.Kind == yaml.MappingNode {
		for k := 0; k+1 < len(m.Content); k += 2 {
			// "<<" is a YAML merge key (<<: *defaults), which Decode applies.
			if key := m.Content[k].Value; key != "<<" && !slices.Contains(relayKeys, key) {
				return r, fmt.Errorf("unknown key %q (known: %s)", key, strings.Join(relayKeys, ", "))
			}
		}
	}
	return r, r.validate()
}

// relayKeys are the keys a relay entry may have: Relay's yaml tags.
var relayKeys = func() []string {
	var keys []string
	t := reflect.TypeFor[Relay]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		keys = append(keys, name)
	}
	return keys
}()

// entryName says which entry an error is about: its index, its line in the
// file and, when it has one, its name.
func entryName(i int, n *yaml.Node, name string) string {
	s := fmt.Sprintf("relays[%d] (line %d", i, n.Line)
	if name != "" {
		s += fmt.Sprintf(", name %q", name)
	}
	return s + ")"
}

// Problems joins the errors of the entries Parse skipped; nil when none.
func (f *File) Problems() error { return errors.Join(f.Skipped...) }

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
	for i, e := range f.Skipped {
		f.Skipped[i] = fmt.Errorf("%s: %w", path, e)
	}
	return f, nil
}

// validate checks a relay has a name and its addresses are host:port.
func (r Relay) validate() error {
	if r.Name == "" {
		return errors.New("name: required")
	}
	var bad []string
	for _, a := range []struct{ key, v string }{{"socks", r.SOCKS}, {"http", r.HTTP}, {"admin", r.Admin}, {"relay", r.Relay}} {
		if a.v == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %q is not host:port", a.key, a.v))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// Marshal encodes the file as YAML.
func (f *File) Marshal() ([]byte, error) { return yaml.Marshal(f) }
