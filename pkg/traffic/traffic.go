// Package traffic is the lab server's traffic service: a download source and
// an upload sink over HTTP, so any HTTP client (curl through a relay chain)
// can measure both directions and check integrity.
//
//	GET  /bytes/N   N pseudo-random bytes (Content-Length: N), seeded by N:
//	                the same N always gives the same bytes.
//	GET  /sha256/N  the hex SHA-256 of what /bytes/N sends, to check a download
//	                (Handler only: it costs the server a pass over N bytes).
//	POST /upload    reads the whole body, at most MaxBytes; answers
//	                {"bytes":n,"sha256":"..."}.
//	GET  /healthz   "ok".
package traffic

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// MaxBytes bounds one download and one upload (16 GiB, a minute and more
// at 2 Gbit/s): a typo must not stream forever.
const MaxBytes = 16 << 30

// Handler returns the service's HTTP handler: the lab's server nodes,
// which curl checks downloads against (/sha256/N).
func Handler() http.Handler {
	mux := TransferHandler().(*http.ServeMux)
	mux.HandleFunc("GET /sha256/{n}", serveSHA256)
	return mux
}

// TransferHandler is Handler without /sha256/N: the source and the sink
// alone, what a relay's admin API serves. A hash costs the server a pass
// over N bytes of CPU and sends nothing back while it runs; a benchmarking
// client hashes what it received itself (ExpectedSHA256).
func TransferHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /bytes/{n}", serveBytes)
	mux.HandleFunc("POST /upload", uploadSink(MaxBytes))
	return mux
}

func parseN(w http.ResponseWriter, r *http.Request) (int64, bool) {
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 0 || n > MaxBytes {
		http.Error(w, fmt.Sprintf("want a byte count N with 0 <= N <= %d", int64(MaxBytes)), http.StatusBadRequest)
		return 0, false
	}
	return n, true
}

// serveSHA256 answers /sha256/N, stopping when the client leaves: a hash
// nobody waits for is CPU spent for nothing.
func serveSHA256(w http.ResponseWriter, r *http.Request) {
	n, ok := parseN(w, r)
	if !ok {
		return
	}
	sum, err := expectedSHA256(r.Context(), n)
	if err != nil {
		return // the client went away
	}
	_, _ = io.WriteString(w, sum+"\n")
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

// uploadSink reads and hashes a body of at most limit bytes: a longer one
// (declared, or sent without a length) is answered 413 once limit is
// passed, instead of being read forever.
func uploadSink(limit int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tooLarge := fmt.Sprintf("an upload is at most %d bytes", limit)
		if r.ContentLength > limit {
			w.Header().Set("Connection", "close")
			http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
			return
		}
		h := sha256.New()
		n, err := io.Copy(h, http.MaxBytesReader(w, r.Body, limit))
		var tooMuch *http.MaxBytesError
		switch {
		case errors.As(err, &tooMuch):
			http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(UploadResult{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))})
	}
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
	sum, _ := expectedSHA256(context.Background(), n) // never cancelled
	return sum
}

// hashChunkBytes is how much expectedSHA256 hashes between two looks at
// its context: a few milliseconds of CPU.
const hashChunkBytes = 4 << 20

// expectedSHA256 is ExpectedSHA256, given up when ctx is done.
func expectedSHA256(ctx context.Context, n int64) (string, error) {
	h := sha256.New()
	src := NewSource(uint64(n))
	for left := n; left > 0; left -= hashChunkBytes {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		_, _ = io.Copy(h, io.LimitReader(src, min(left, hashChunkBytes)))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
