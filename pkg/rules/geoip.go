package rules

import (
	"fmt"
	"iter"
	"net/netip"
	"strings"

	"github.com/oschwald/maxminddb-golang/v2"
)

// GeoIP answers an address's country from a MaxMind-format database: the
// GeoIP2/GeoLite2 country and city layouts (country.iso_code, as DB-IP's
// lite databases and Clash's Country.mmdb have it too) and sing-box's
// sing-geoip layout (the record is the code).
type GeoIP struct {
	db   *maxminddb.Reader
	file string
	// bare: the record is the country code itself (sing-geoip).
	bare bool
}

// OpenGeoIP opens a country database. It is read through a memory map
// for the life of the process.
func OpenGeoIP(file string) (*GeoIP, error) {
	db, err := maxminddb.Open(file)
	if err != nil {
		return nil, fmt.Errorf("geoip %s: %w", file, err)
	}
	return &GeoIP{db: db, file: file, bare: db.Metadata.DatabaseType == "sing-geoip"}, nil
}

// File is the database's path.
func (g *GeoIP) File() string { return g.file }

// Country is a's ISO 3166-1 country code in upper case, "" when the
// database has no country for it.
func (g *GeoIP) Country(a netip.Addr) string {
	code, _ := g.decode(g.db.Lookup(a))
	return code
}

func (g *GeoIP) decode(res maxminddb.Result) (string, error) {
	if !res.Found() {
		return "", res.Err()
	}
	var code string
	var err error
	if g.bare {
		err = res.Decode(&code)
	} else {
		err = res.DecodePath(&code, "country", "iso_code")
	}
	return strings.ToUpper(code), err
}

// Networks yields every network of the database whose country is one of
// codes, with its code: what a PAC file, which cannot read the database,
// lists for GEOIP rules.
func (g *GeoIP) Networks(codes map[string]bool) iter.Seq2[netip.Prefix, string] {
	return func(yield func(netip.Prefix, string) bool) {
		for res := range g.db.Networks() {
			code, err := g.decode(res)
			if err != nil || !codes[code] {
				continue
			}
			p := res.Prefix()
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			if !yield(p.Masked(), code) {
				return
			}
		}
	}
}
