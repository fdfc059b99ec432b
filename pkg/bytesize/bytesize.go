// Package bytesize parses transfer sizes written for people: "100KB",
// "10 MB", "1GiB", "1.5MiB", "4096".
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// units are the suffixes Parse accepts, longest first so that "KiB" is
// not read as "B". KB, MB, GB are decimal (10³, 10⁶, 10⁹, as transfer
// sizes and link rates are quoted); KiB, MiB, GiB and the bare K, M, G are
// binary (2¹⁰, 2²⁰, 2³⁰, as tools like dd and curl read them).
var units = []struct {
	suffix string
	bytes  int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// Parse reads a size in bytes: a non-negative number, maybe fractional,
// with an optional unit suffix (case-insensitive; spaces allowed between).
// The result is rounded down to whole bytes.
func Parse(s string) (int64, error) {
	num := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if len(num) > len(u.suffix) && strings.EqualFold(num[len(num)-len(u.suffix):], u.suffix) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.suffix)]), u.bytes
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (100KB, 10MB, 1GiB)", s)
	case f < 0:
		return 0, fmt.Errorf("size %q: want a size >= 0", s)
	}
	b := f * float64(mult)
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(b), nil
}

// Format writes n bytes with the largest decimal unit that keeps about
// three significant digits: "100 KB", "10.5 MB", "1.07 GB", "512 B".
func Format(n int64) string {
	for _, u := range []struct {
		scale float64
		name  string
	}{{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "KB"}} {
		if float64(n) >= u.scale {
			v := float64(n) / u.scale
			switch {
			case v >= 100:
				return strconv.FormatFloat(v, 'f', 0, 64) + " " + u.name
			case v >= 10:
				return strconv.FormatFloat(v, 'f', 1, 64) + " " + u.name
			}
			return strconv.FormatFloat(v, 'f', 2, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}
