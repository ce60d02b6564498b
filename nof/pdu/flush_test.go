package pdu_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/nof/pdu"
)

// gateWriter blocks its first Write until released and records all bytes.
type gateWriter struct {
	entered, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	buf              bytes.Buffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

func (g *gateWriter) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Len()
}

// A small PDU sent while another goroutine flushes is queued, not written;
// Flush returns only once it is written.
func TestWriterFlush(t *testing.T) {
	g := &gateWriter{entered: make(chan struct{}), release: make(chan struct{})}
	w := pdu.NewWriter(g)
	first := &pdu.CapsuleResp{Cpl: pdu.Completion{CID: 1}}
	second := &pdu.CapsuleResp{Cpl: pdu.Completion{CID: 2}}
	go w.Send(first) // becomes the flusher and blocks in Write
	<-g.entered
	if err := w.Send(second); err != nil {
		t.Fatal(err)
	}
	if g.len() != 0 {
		t.Fatal("second PDU written while the first write is blocked")
	}
	flushed := make(chan error, 1)
	go func() { flushed <- w.Flush() }()
	close(g.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	want := second.AppendPDU(first.AppendPDU(nil, pdu.Options{}), pdu.Options{})
	g.mu.Lock()
	got := g.buf.Bytes()
	g.mu.Unlock()
	if !bytes.Equal(got, want) {
		t.Fatalf("after Flush the stream holds %d bytes, want both PDUs (%d)", len(got), len(want))
	}
	if err := w.Flush(); err != nil { // nothing pending: returns at once
		t.Fatal(err)
	}
}
