package traffic

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestBytesDeterministicWithHash(t *testing.T) {
	ts := httptest.NewServer(Handler())
	defer ts.Close()
	const n = 1<<20 + 7
	var first []byte
	for i := 0; i < 2; i++ {
		resp, err := http.Get(ts.URL + "/bytes/1048583")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(body) != n {
			t.Fatalf("read %d bytes, err %v", len(body), err)
		}
		sum := sha256.Sum256(body)
		hresp, err := http.Get(ts.URL + "/sha256/1048583")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := io.ReadAll(hresp.Body)
		hresp.Body.Close()
		if got := hex.EncodeToString(sum[:]) + "\n"; got != string(want) {
			t.Fatalf("body hash %s, /sha256 says %s", got, want)
		}
		if first == nil {
			first = body
		} else if !bytes.Equal(first, body) {
			t.Fatal("two downloads of the same N differ")
		}
	}
}

func TestUpload(t *testing.T) {
	ts := httptest.NewServer(Handler())
	defer ts.Close()
	body := bytes.Repeat([]byte("relaymesh"), 100000)
	resp, err := http.Post(ts.URL+"/upload", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r UploadResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	if r.Bytes != int64(len(body)) || r.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("got %+v, want %d bytes %x", r, len(body), sum)
	}
}

func TestBadRequests(t *testing.T) {
	ts := httptest.NewServer(Handler())
	defer ts.Close()
	for _, p := range []string{"/bytes/-1", "/bytes/x", "/bytes/99999999999999"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", p, resp.StatusCode)
		}
	}
}
