package stripe

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// chunkBytes is what one chunk holds in memory: its buffer and counters.
const chunkBytes = int64(unsafe.Sizeof(chunk{}))

// windowChunks is the reorder window, in chunks, of a Conn over links
// links asked to hold reorderBytes (0: DefaultReorderBytes). A power of
// two, so that seq % window stays one slot per seq across the wrap of the
// uint32 seq; at least two chunks per link, so each link may run ahead.
func windowChunks(links, reorderBytes int) int {
	if reorderBytes <= 0 {
		reorderBytes = DefaultReorderBytes
	}
	window := 1
	for window < max(reorderBytes/ChunkBytes, 2*links) {
		window *= 2
	}
	return window
}

// HeldBytes is the most chunk memory a Conn over links links with
// reorderBytes (0: DefaultReorderBytes) holds at once, both directions
// together. Receiving: the window full, and each link's reader holding
// the chunk it read while it waits for room. Sending: the chunk Write is
// filling, the queue (one per link) and each link's writer's chunk. The
// chunks come and go as data moves (a pool), so an idle Conn holds far
// less; this is the bound a Budget reserves.
func HeldBytes(links, reorderBytes int) int64 {
	chunks := windowChunks(links, reorderBytes) + links + 1 + 2*links
	return int64(chunks) * chunkBytes
}

// ErrBudget: a Budget had no room for one more Conn.
var ErrBudget = errors.New("stripe: reorder budget exhausted")

// BudgetError says how far a Budget fell short; it matches ErrBudget.
type BudgetError struct {
	NeedBytes, FreeBytes, LimitBytes int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("stripe: reorder budget exhausted: a striped stream needs %.1f MiB, %.1f MiB of %.1f MiB free",
		mib(e.NeedBytes), mib(e.FreeBytes), mib(e.LimitBytes))
}

func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// Budget bounds the chunk memory of the Conns made on its reservations
// (NewReserved), all together: a Conn reserves its HeldBytes before it
// exists, and gives them back when Close has stopped its goroutines, so
// what they hold can never pass the limit, however many are opened. A nil
// *Budget has no limit. Safe for concurrent use.
type Budget struct {
	limitBytes int64
	mu         sync.Mutex
	usedBytes  int64
}

// NewBudget is a budget of limitBytes (at least 0).
func NewBudget(limitBytes int64) *Budget { return &Budget{limitBytes: max(limitBytes, 0)} }

// LimitBytes is the budget's limit; 0 for a nil Budget (none).
func (b *Budget) LimitBytes() int64 {
	if b == nil {
		return 0
	}
	return b.limitBytes
}

// UsedBytes is what the reservations outstanding hold.
func (b *Budget) UsedBytes() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.usedBytes
}

// Reserve takes HeldBytes(links, reorderBytes) from b for one Conn, or
// fails with a *BudgetError (errors.Is ErrBudget) when they are not free.
// It never waits: a stream refused now is better told so at once than
// held while its peer's handshake timer runs.
func (b *Budget) Reserve(links, reorderBytes int) (*Reservation, error) {
	r := &Reservation{b: b, links: links, reorderBytes: reorderBytes, bytes: HeldBytes(links, reorderBytes)}
	if b == nil {
		return r, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if free := b.limitBytes - b.usedBytes; r.bytes > free {
		return nil, &BudgetError{NeedBytes: r.bytes, FreeBytes: free, LimitBytes: b.limitBytes}
	}
	b.usedBytes += r.bytes
	return r, nil
}

// Reservation is one Conn's share of a Budget: for a Conn over links
// links holding reorderBytes out of order.
type Reservation struct {
	b                   *Budget
	links, reorderBytes int
	bytes               int64
	once                sync.Once
}

// Bytes is what r holds of its budget.
func (r *Reservation) Bytes() int64 { return r.bytes }

// Release gives r back to its budget; later calls do nothing. A
// Conn made on r calls it from Close: call it only for a reservation
// no Conn took.
func (r *Reservation) Release() {
	if r == nil || r.b == nil {
		return
	}
	r.once.Do(func() {
		r.b.mu.Lock()
		r.b.usedBytes -= r.bytes
		r.b.mu.Unlock()
	})
}
