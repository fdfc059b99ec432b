package traffic

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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

// The hash taken in chunks is the hash of the whole stream.
func TestExpectedSHA256Chunked(t *testing.T) {
	const n = 2*hashChunkBytes + 3
	h := sha256.New()
	_, _ = io.Copy(h, io.LimitReader(NewSource(n), n))
	if got, want := ExpectedSHA256(n), hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("chunked %s, whole %s", got, want)
	}
}

// An upload is bounded: one that declares more than the limit is refused
// before its body is read, and one sent without a length is cut at it.
// The sink used to read whatever came, for as long as it came.
func TestUploadBounded(t *testing.T) {
	ts := httptest.NewServer(TransferHandler())
	defer ts.Close()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nsome bytes", int64(MaxBytes)+1)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("an upload declaring MaxBytes+1: %v (want 413 at once)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("an upload declaring MaxBytes+1: %s, want 413", resp.Status)
	}

	small := httptest.NewServer(uploadSink(1000))
	defer small.Close()
	body := io.MultiReader(bytes.NewReader(make([]byte, 2000))) // no length: chunked
	resp, err = http.Post(small.URL, "application/octet-stream", body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunked upload over the limit: %s, want 413", resp.Status)
	}
}

// /sha256/N stops hashing when its client leaves. It used to hash all N
// bytes (16 GiB: tens of seconds of a core) for a client long gone.
func TestSHA256StopsWithItsClient(t *testing.T) {
	returned := make(chan time.Time, 1)
	h := Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		returned <- time.Now()
	}))
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/sha256/%d", ts.URL, int64(MaxBytes)), nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a 16 GiB hash answered within 200 ms")
	}
	left := time.Now()
	select {
	case at := <-returned:
		t.Logf("the handler returned %v after its client left", at.Sub(left).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("the handler still hashing 3 s after its client left")
	}
	if resp, err := http.Get(ts.URL + "/sha256/1"); err == nil {
		resp.Body.Close() // the handler's report
		<-returned
	}
}

// The relay's handler serves no hash at all.
func TestTransferHandlerHasNoHash(t *testing.T) {
	ts := httptest.NewServer(TransferHandler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/sha256/1024")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/sha256 on the transfer handler: %s, want 404", resp.Status)
	}
}
