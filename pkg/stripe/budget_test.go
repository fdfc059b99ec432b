package stripe

import (
	"errors"
	"testing"
)

// A Budget lends each Conn its whole bound or nothing, and gets it back
// when the Conn made on it is closed (not before).
func TestBudgetReservesWholeStreams(t *testing.T) {
	one := HeldBytes(2, 0)
	if want := int64(windowChunks(2, 0)) * chunkBytes; one <= want {
		t.Fatalf("HeldBytes %d does not cover the reorder window alone, %d", one, want)
	}
	b := NewBudget(one + one/2)
	r, err := b.Reserve(2, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Reserve(2, 0)
	var be *BudgetError
	if !errors.Is(err, ErrBudget) || !errors.As(err, &be) || be.NeedBytes != one || be.FreeBytes != one/2 {
		t.Fatalf("second reservation: %v, want a BudgetError needing %d with %d free", err, one, one/2)
	}
	a, _ := linkPairs(t, 2)
	if _, err := NewReserved(a[:1], r); err == nil {
		t.Fatal("a reservation for 2 links made a stream over 1")
	}
	c, err := NewReserved(a, r)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.UsedBytes(); got != one {
		t.Fatalf("used %d with one stream open, want %d", got, one)
	}
	c.Close()
	if got := b.UsedBytes(); got != 0 {
		t.Fatalf("used %d once the stream closed, want 0", got)
	}
	r.Release() // after the Conn's own: nothing more
	if got := b.UsedBytes(); got != 0 {
		t.Fatalf("used %d after a second release, want 0", got)
	}
	if r, err = b.Reserve(2, 0); err != nil {
		t.Fatalf("after the stream closed: %v", err)
	}
	r.Release()
	// A nil Budget bounds nothing.
	if _, err := (*Budget)(nil).Reserve(MaxLinks, 64<<20); err != nil {
		t.Fatal(err)
	}
}
