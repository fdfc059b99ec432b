package rules

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// writeCountryDB writes a small MaxMind-format database of dbType mapping
// each network to a country the way that layout records it: GeoLite2's
// {country: {iso_code}} map, or sing-geoip's bare code.
func writeCountryDB(t *testing.T, dbType string, networks map[string]string) string {
	t.Helper()
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: dbType, RecordSize: 24, IncludeReservedNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	for cidr, code := range networks {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		var rec mmdbtype.DataType = mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(code)}}
		if dbType == "sing-geoip" {
			rec = mmdbtype.String(strings.ToLower(code))
		}
		if err := w.Insert(n, rec); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "country.mmdb")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := w.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	return path
}

var testCountries = map[string]string{
	"203.0.113.0/24":  "JP",
	"198.51.100.0/24": "CN",
	"2001:db8::/32":   "JP",
	"2001:db9::/32":   "DE",
}

// GEOIP rules match a literal address by the database's country, in file
// order with the other rules, in both database layouts; a name is never
// looked up.
func TestGeoIP(t *testing.T) {
	for _, dbType := range []string{"GeoLite2-Country", "sing-geoip"} {
		t.Run(dbType, func(t *testing.T) {
			db, err := OpenGeoIP(writeCountryDB(t, dbType, testCountries))
			if err != nil {
				t.Fatal(err)
			}
			s, err := Parse(strings.NewReader(`IP-CIDR,203.0.113.128/25,REJECT
GEOIP,jp,CHAIN:tokyo
GEOIP,CN,DIRECT,no-resolve
GEOIP,LAN,DIRECT
`), "geo.rules", db)
			if err != nil {
				t.Fatal(err)
			}
			for dst, want := range map[string]string{
				"203.0.113.7:443":          "CHAIN:tokyo",
				"203.0.113.200:443":        "REJECT",
				"198.51.100.1:443":         "DIRECT",
				"[2001:db8::1]:443":        "CHAIN:tokyo",
				"[2001:db9::1]:443":        "PLAN",
				"[::ffff:203.0.113.7]:443": "CHAIN:tokyo",
				"192.0.2.1:443":            "PLAN",
				"10.0.0.1:443":             "DIRECT",
				"www.example.jp:443":       "PLAN",
			} {
				if d := s.MatchAddr(dst); d.Action.String() != want {
					t.Errorf("%s: %s, want %s", dst, d.Action, want)
				}
			}
			// A PAC file lists the database's networks for the rules'
			// countries, and answers as Match does.
			vm := pacRuntime(t, s)
			for _, host := range []string{"203.0.113.7", "203.0.113.200", "198.51.100.1", "2001:db8::1", "2001:db9::1", "192.0.2.1", "10.0.0.1"} {
				if got, want := pacAction(t, vm, "https://"+host+"/", host), wantPAC(s, host, 443); got != want {
					t.Errorf("PAC %s: %s, want %s", host, got, want)
				}
			}
		})
	}
}

// A GEOIP rule needs a database; a file that is not one is refused at
// load.
func TestGeoIPErrors(t *testing.T) {
	_, err := Parse(strings.NewReader("GEOIP,LAN,DIRECT\nGEOIP,JP,DIRECT\n"), "f", nil)
	if err == nil || !strings.Contains(err.Error(), "f:2: GEOIP,JP: GEOIP needs a MaxMind-format country database") {
		t.Fatalf("%v", err)
	}
	bogus := filepath.Join(t.TempDir(), "not.mmdb")
	if err := os.WriteFile(bogus, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "rules.txt")
	if err := os.WriteFile(rules, []byte("GEOIP,JP,DIRECT\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(rules, Options{GeoIPFile: bogus}); err == nil || !strings.Contains(err.Error(), "geoip "+bogus) {
		t.Fatalf("a file that is not a database: %v", err)
	}
}
