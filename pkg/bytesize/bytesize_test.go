package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "4096": 4096, "100KB": 100000, "100 kb": 100000, "10MB": 10000000,
		"1GiB": 1 << 30, "1.5MiB": 3 << 19, "64K": 64 << 10, "2M": 2 << 20, "1G": 1 << 30,
		"1GB": 1e9, "512B": 512, " 7 KiB ": 7 << 10, "1TB": 1e12,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "KB", "-1", "ten", "1 XB", "NaN", "Inf", "1e30GB"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 100000: "100 KB", 10_500_000: "10.5 MB", 1 << 30: "1.07 GB", 1500: "1.50 KB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
