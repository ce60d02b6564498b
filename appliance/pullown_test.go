package appliance

import (
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// wakeCounter is a records stream that only counts Wake calls: the
// in-process stream's Wake is what ends the wait of a put whose quiet
// commit record nobody took.
type wakeCounter struct{ wakes int }

func (w *wakeCounter) Send(*kvtierpb.TakeDramRecordsRequest) error { return nil }
func (w *wakeCounter) Recv() (*kvtierpb.TakeDramRecordsResponse, error) {
	select {} // never used here
}
func (w *wakeCounter) TryRecv(uint64) (*kvtierpb.TakeDramRecordsResponse, bool) { return nil, false }
func (w *wakeCounter) Wake()                                                    { w.wakes++ }

// TestPullOwnRecordsBusyWakes: a direct put that finds another goroutine
// applying records leaves its own record to the stream goroutine, and
// must wake it: the other goroutine may have taken its records before
// this put's quiet record was queued, and nothing else wakes the stream
// before its next poll.
func TestPullOwnRecordsBusyWakes(t *testing.T) {
	a := &Appliance{}
	w := &wakeCounter{}
	var p recordsPuller = w
	a.rec.puller.Store(&p)
	a.rec.outbox = 1
	a.rec.mu.Lock() // another put is applying records
	if a.pullOwnRecords(1, 5) {
		t.Fatal("pulled records while another goroutine held them")
	}
	a.rec.mu.Unlock()
	if w.wakes != 1 {
		t.Fatalf("stream woken %d times, want 1", w.wakes)
	}
	// Nothing to take yet: it wakes the stream too, and reports false.
	if a.pullOwnRecords(1, 5) || w.wakes != 2 {
		t.Fatalf("empty outbox: wakes %d, want 2", w.wakes)
	}
	// Records already applied: true, no wake.
	a.rec.applied = 5
	if !a.pullOwnRecords(1, 5) || w.wakes != 2 {
		t.Fatalf("applied: wakes %d, want 2", w.wakes)
	}
}
