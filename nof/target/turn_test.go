package target

import (
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/testnet"
)

// TestPollYieldRunsNetworkReader checks the property answerTurn relies
// on: on a single scheduler P, a goroutine that writes to a socket and then
// yields lets the goroutine parked reading the other end run before it
// continues, although it never blocked itself.
func TestPollYieldRunsNetworkReader(t *testing.T) {
	y := newPollYield()
	if y == nil {
		t.Skip("eventfd not available: answer turns run without yielding")
	}
	defer y.f.Close()
	a, b := testnet.TCPPair(t)

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const rounds = 50
	var got atomic.Int64
	readerDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 1)
		for i := 0; i < rounds; i++ {
			if _, err := io.ReadFull(b, buf); err != nil {
				readerDone <- err
				return
			}
			got.Add(1)
		}
		readerDone <- nil
	}()
	time.Sleep(10 * time.Millisecond) // let the reader park in the poller
	misses := 0
	for i := 0; i < rounds; i++ {
		if _, err := a.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		y.yield()
		if got.Load() != int64(i+1) {
			misses++
			for got.Load() < int64(i+1) {
				runtime.Gosched()
				time.Sleep(time.Millisecond)
			}
		}
	}
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}
	// Allow a rare miss (a poll by sysmon or a GC worker can reorder), but
	// the yield must normally let the reader run first.
	if misses > rounds/10 {
		t.Fatalf("reader had not run after %d of %d yields", misses, rounds)
	}
}

// TestAnswerTurnExclusive checks that answers sent in turn never overlap
// and that every one of them is sent, with and without yielding.
func TestAnswerTurnExclusive(t *testing.T) {
	tr := newAnswerTurn()
	defer tr.close()
	var inside, max, sent atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				tr.do(func() {
					n := inside.Add(1)
					if n > max.Load() {
						max.Store(n)
					}
					runtime.Gosched()
					inside.Add(-1)
					sent.Add(1)
				}, func() bool { return (i+j)%2 == 0 })
			}
		}(i)
	}
	wg.Wait()
	if max.Load() != 1 {
		t.Fatalf("%d answers were sent at once", max.Load())
	}
	if sent.Load() != 16*20 {
		t.Fatalf("sent %d answers, want %d", sent.Load(), 16*20)
	}
}
