package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
)

// TestRunEvictsInBackground checks that Run owns the evictor: with MEMORY
// above the watermark and nothing leased, the background loop frees space
// without anyone calling EvictNow. It polls (bounded) rather than timing.
func TestRunEvictsInBackground(t *testing.T) {
	m, err := New(Config{Clock: clock.Real{}, EvictInterval: time.Millisecond, OffloadMode: OffloadOff})
	if err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "a", "a/0", 6400)
	for i := 0; i < 100; i++ {
		put(t, m, "w", fmt.Sprint(i), 64)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(c); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for ctrOf(m, "evictions") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background evictor never ran")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done // Run returns when its context is done
	_, used := m.memoryUsage()
	if used > 5760 {
		t.Fatalf("still above the watermark: %d", used)
	}
	if err := m.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestSubscriptionClose(t *testing.T) {
	m, _ := newTest(t, Config{})
	s := m.Subscribe(0)
	s.Close()
	s.Close() // idempotent
	if _, ok := <-s.C(); ok {
		t.Fatal("channel open after Close")
	}
	mountMem(t, m, "a", "a/0", 4096) // publishing after Close must not panic
	if m.events.n.Load() != 0 {
		t.Fatal("subscriber not removed")
	}
}
