// Package traffic is the lab server's traffic service: a download source and
// an upload sink over HTTP, so any HTTP client (curl through a relay chain)
// can measure both directions and check integrity.
//
//	GET  /bytes/N   N pseudo-random bytes (Content-Length: N), seeded by N:
//	                the same N always gives the same bytes.
//	GET  /sha256/N  the hex SHA-256 of what /bytes/N sends, to check a download.
//	POST /upload    reads the whole body; answers {"bytes":n,"sha256":"..."}.
//	GET  /healthz   "ok".
package traffic

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// MaxBytes bounds one download (16 GiB, a minute and more at 2 Gbit/s): a
// typo must not stream forever.
const MaxBytes = 16 << 30

// Handler returns the service's HTTP handler.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /bytes/{n}", serveBytes)
	mux.HandleFunc("GET /sha256/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, ok := parseN(w, r)
		if ok {
			_, _ = io.WriteString(w, ExpectedSHA256(n)+"\n")
		}
	})
	mux.HandleFunc("POST /upload", serveUpload)
	return mux
}

func parseN(w http.ResponseWriter, r *http.Request) (int64, bool) {
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 0 || n > MaxBytes {
		http.Error(w, "want a byte count N with 0 <= N <= 68719476736", http.StatusBadRequest)
		return 0, false
	}
	return n, true
}

func serveBytes(w http.ResponseWriter, r *http.Request) {
	n, ok := parseN(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	_, _ = io.Copy(w, io.LimitReader(NewSource(uint64(n)), n)) // an error: the client went away
}

// UploadResult is what POST /upload answers.
type UploadResult struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

func serveUpload(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(UploadResult{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))})
}

// Source is an endless deterministic pseudo-random byte stream (ChaCha8,
// ~1 GB/s: faster than any emulated link, so it never limits a benchmark).
type Source struct {
	rng *rand.ChaCha8
}

// NewSource returns the stream for a seed; GET /bytes/N uses seed N.
func NewSource(seed uint64) *Source {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	copy(key[8:], "relaymesh traffic source")
	return &Source{rng: rand.NewChaCha8(key)}
}

// Read fills p; it never fails.
func (s *Source) Read(p []byte) (int, error) { return s.rng.Read(p) }

// ExpectedSHA256 is the hex SHA-256 of GET /bytes/N, for clients that check.
func ExpectedSHA256(n int64) string {
	h := sha256.New()
	_, _ = io.Copy(h, io.LimitReader(NewSource(uint64(n)), n))
	return hex.EncodeToString(h.Sum(nil))
}
