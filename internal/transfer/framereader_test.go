package transfer

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/testnet"
)

// readCounter counts the reads a serving connection makes.
type readCounter struct {
	net.Conn
	reads atomic.Int32
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// serveChunked feeds in to a serving connection of e, written chunk
// bytes at a time (0: in one write), and returns everything the server
// answered and the reads it made, its last (the one that saw the end)
// included.
func serveChunked(t *testing.T, e *Engine, in []byte, chunk int) ([]byte, int) {
	t.Helper()
	// Loopback TCP rather than a pipe: the client half-closes, so the
	// server sees the end of its input and the answers still arrive.
	b, a := testnet.TCPPair(t)
	rc := &readCounter{Conn: a}
	done := make(chan struct{})
	e.wg.Add(1)
	go func() {
		defer close(done)
		e.serveConn(rc)
	}()
	go func() {
		for len(in) > 0 {
			n := len(in)
			if chunk > 0 {
				n = min(n, chunk)
			}
			if _, err := b.Write(in[:n]); err != nil {
				break
			}
			in = in[n:]
		}
		b.(*net.TCPConn).CloseWrite()
	}()
	out, _ := io.ReadAll(b)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the serving connection did not end after its input did")
	}
	return out, int(rc.reads.Load())
}

// A get's frame (header and name) arrives in one read, and pipelined
// frames share reads: before frameReader every frame took two reads,
// one for its header and one for its name.
func TestFrameHeadInOneRead(t *testing.T) {
	e := newEngine(t, Config{IOTimeout: time.Second})
	mem := bytes.Repeat([]byte("kvtier"), 100)
	if err := e.RegisterSegment("seg", mem); err != nil {
		t.Fatal(err)
	}
	out, reads := serveChunked(t, e, frame(Read, 1, "seg", 0, 6, 12), 0)
	if want := responseHeaderLen + 12; len(out) != want || !bytes.Equal(out[responseHeaderLen:], mem[6:18]) {
		t.Fatalf("answer of %d bytes (%q), want %d ending in %q", len(out), out, want, mem[6:18])
	}
	if reads != 2 {
		t.Fatalf("%d reads for one frame and the end of the stream, want 2", reads)
	}
	var five []byte
	for i := range 5 {
		five = append(five, frame(Read, uint64(i+1), "seg", 0, uint64(i), 4)...)
	}
	out, reads = serveChunked(t, e, five, 0)
	if want := 5 * (responseHeaderLen + 4); len(out) != want {
		t.Fatalf("answers of %d bytes to five pipelined reads, want %d", len(out), want)
	}
	if reads != 2 {
		t.Fatalf("%d reads for five pipelined frames of %d bytes in all, want 2", reads, len(five))
	}
}

// The bytes one read takes past a frame's head belong to its payload or
// to the next frame: the answers and the memory must not depend on where
// the stream was cut.
func TestFramesCutAnywhere(t *testing.T) {
	var in []byte
	in = append(in, frame(Write, 1, "seg", 0, 8, 5)...)
	in = append(in, "hello"...)
	in = append(in, frame(Read, 2, "seg", 0, 6, 8)...)
	in = append(in, frame(Read, 3, "nope", 0, 0, 1)...)                    // refused
	in = append(in, append(frame(Write, 4, "nope", 0, 0, 3), "xyz"...)...) // refused, its payload skipped
	in = append(in, batchFrame(opBatchWrite, 5, []string{"seg"}, []batchExtent{{0, 20, 3}, {0, 40, 2}}, []byte("abcde"))...)
	in = append(in, batchFrame(opBatchRead, 6, []string{"seg"}, []batchExtent{{0, 19, 5}, {0, 39, 4}}, nil)...)
	in = append(in, frame(Read, 7, "seg", 0, 0, 64)...)

	run := func(chunk int) ([]byte, []byte) {
		e := newEngine(t, Config{IOTimeout: 2 * time.Second})
		mem := make([]byte, 64)
		if err := e.RegisterSegment("seg", mem); err != nil {
			t.Fatal(err)
		}
		out, _ := serveChunked(t, e, in, chunk)
		return out, mem
	}
	wantOut, wantMem := run(0)
	if !bytes.Contains(wantOut, []byte("hello")) || !bytes.Contains(wantOut, []byte("abc")) || !bytes.Equal(wantMem[8:13], []byte("hello")) {
		t.Fatalf("the stream in one write: memory %q, answers %q", wantMem, wantOut)
	}
	for _, chunk := range []int{1, 7, 41, 45} {
		out, mem := run(chunk)
		if !bytes.Equal(out, wantOut) || !bytes.Equal(mem, wantMem) {
			t.Fatalf("written %d bytes at a time: answers %q and memory %q, want %q and %q", chunk, out, mem, wantOut, wantMem)
		}
	}
}

// fill refuses a head longer than its buffer instead of reading into no
// room (a zero-length read returns nothing, forever).
func TestFrameReaderRefusesAnOversizedHead(t *testing.T) {
	a, _ := testnet.TCPPair(t)
	f := frameReader{nc: a}
	if err := f.fill(frameHeadMax + 1); !errors.Is(err, errMalformed) {
		t.Fatalf("fill past the buffer: %v, want a malformed-frame error", err)
	}
}
