package transfer

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
)

// A Do caller that sends its frame itself reads the response itself; a
// Submit caller, who may wait later or never, leaves it to the receive
// goroutine.
func TestDoReadsItsOwnResponse(t *testing.T) {
	_, mem, addr := serverEngine(t, "s", 1<<20)
	cli := newEngine(t, Config{ConnsPerPeer: 1})
	buf := make([]byte, 64<<10)
	read := Request{Op: Read, Endpoint: addr, Segment: "s", Offset: 4096, Buf: buf}
	// The first request waits for the lane to dial: the lane sends it and
	// the receive goroutine reads the answer.
	if err := do1(t, cli, read); err != nil {
		t.Fatal(err)
	}
	if n := cli.Stats().CallerReads; n != 0 {
		t.Fatalf("%d responses read by callers after a lane's send", n)
	}
	for i := range 3 {
		clear(buf)
		if err := do1(t, cli, read); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, mem[4096:4096+len(buf)]) {
			t.Fatalf("read %d: bytes differ", i)
		}
		if n := cli.Stats().CallerReads; n != uint64(i+1) {
			t.Fatalf("after %d reads on an idle connection, %d read by their callers", i+1, n)
		}
	}
	src := randBytes(9, 8<<10)
	if err := do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "s", Offset: 1 << 19, Buf: src}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[1<<19:1<<19+len(src)], src) {
		t.Fatal("write did not land")
	}
	if n := cli.Stats().CallerReads; n != 4 {
		t.Fatalf("a write's caller did not read its answer: %d caller reads", n)
	}
	clear(buf)
	if err := cli.Submit(context.Background(), []Request{read}).Wait()[0]; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, mem[4096:4096+len(buf)]) {
		t.Fatal("submitted read: bytes differ")
	}
	if n := cli.Stats().CallerReads; n != 4 {
		t.Fatalf("a Submit's response was read by its caller (%d caller reads)", n)
	}
	if st := cli.Stats(); st.ConnsDialed != 1 || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Do callers, Submit callers and the receive goroutine take turns reading
// one pipelined connection: every response reaches its request, whoever
// reads it, and none is left unread (a lost hand-off hangs the test).
func TestCallersShareTheReadingOfAConnection(t *testing.T) {
	const workers, per, chunk = 6, 60, 24 << 10
	_, mem, addr := serverEngine(t, "c", workers*chunk)
	cli := newEngine(t, Config{ConnsPerPeer: 1, PipelineDepth: 8})
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := uint64(w * chunk)
			got := make([]byte, chunk)
			for i := range per {
				src := randBytes(uint64(w*1000+i), chunk)
				wr := []Request{{Op: Write, Endpoint: addr, Segment: "c", Offset: off, Buf: src}}
				rd := []Request{{Op: Read, Endpoint: addr, Segment: "c", Offset: off, Buf: got}}
				var werr, rerr error
				if (w+i)%3 == 0 { // a third through Submit, read by the receiver
					werr = cli.Submit(context.Background(), wr).Wait()[0]
					rerr = cli.Submit(context.Background(), rd).Wait()[0]
				} else {
					werr = cli.Do(context.Background(), wr)[0]
					rerr = cli.Do(context.Background(), rd)[0]
				}
				if werr != nil || rerr != nil {
					errc <- fmt.Errorf("worker %d round %d: write %v, read %v", w, i, werr, rerr)
					return
				}
				if !bytes.Equal(got, src) {
					errc <- fmt.Errorf("worker %d round %d: read back other bytes", w, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for w := range workers {
		if !bytes.Equal(mem[w*chunk:(w+1)*chunk], randBytes(uint64(w*1000+per-1), chunk)) {
			t.Fatalf("worker %d: the server holds other bytes than its last write", w)
		}
	}
	st := cli.Stats()
	if st.Requests != 2*workers*per || st.Errors != 0 || st.ConnsDialed != 1 {
		t.Fatalf("stats %+v", st)
	}
	if st.CallerReads == 0 || st.CallerReads >= st.Requests {
		t.Fatalf("%d of %d responses read by callers: want some, not all", st.CallerReads, st.Requests)
	}
	t.Logf("%d of %d responses read by their callers", st.CallerReads, st.Requests)
}
