// Package adminapitest is for tests of the admin API's wire: what a JSON
// answer's keys are, in the order they were written.
package adminapitest

import (
	"bytes"
	"encoding/json"
	"testing"
)

// ObjectKeys is the keys of the JSON object b, in order, and the raw value
// of each; it fails t when b is not one.
func ObjectKeys(t testing.TB, b []byte) ([]string, map[string]json.RawMessage) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	var keys []string
	vals := map[string]json.RawMessage{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		vals[tok.(string)] = v
	}
	return keys, vals
}
