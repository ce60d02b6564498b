package transfer

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// splicerOn is newSplicer for a test: closed at its end.
func splicerOn(t *testing.T, nc net.Conn) *splicer {
	t.Helper()
	sp, err := newSplicer(nc)
	if err != nil {
		t.Fatalf("no splicer on a TCP connection: %v", err)
	}
	t.Cleanup(sp.close)
	return sp
}

// TestSplicerSends: payloads sent by reference arrive bit-exact and in
// order: values of odd sizes and offsets, empty ones, one larger than the
// pipe, and more values than one vmsplice takes (IOV_MAX); the caller's
// slice of values is left as it was.
func TestSplicerSends(t *testing.T) {
	a, b := tcpPair(t)
	sp := splicerOn(t, a)
	big := make([]byte, 3<<20+17)
	for i := range big {
		big[i] = byte(i*31 + i>>11)
	}
	vals := [][]byte{big[5 : 300<<10], nil, big[1<<20+3:], []byte("x")}
	for i := range 1100 { // more than IOV_MAX values
		vals = append(vals, big[i*7:i*7+1000+i%13])
	}
	want := bytes.Join(vals, nil)
	before := append([][]byte(nil), vals...)
	got := make([]byte, len(want))
	read := make(chan error, 1)
	go func() { _, err := io.ReadFull(b, got); read <- err }()
	for round := range 2 { // the same splicer again: its pipe was left empty
		if err := sp.send(vals); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := <-read; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: bytes differ", round)
		}
		clear(got)
		go func() { _, err := io.ReadFull(b, got); read <- err }()
	}
	for i := range vals {
		if len(vals[i]) != len(before[i]) || (len(vals[i]) > 0 && &vals[i][0] != &before[i][0]) {
			t.Fatalf("send changed the caller's value %d", i)
		}
	}
	for _, v := range sp.vals[:cap(sp.vals)] {
		if v != nil {
			t.Fatal("the splicer kept a reference to the caller's memory")
		}
	}
}

// TestSplicerSlowReader: a peer that reads only once the socket is full
// leaves the pipe partly drained between splices; the sender neither
// blocks on its own pipe nor loses or reorders bytes.
func TestSplicerSlowReader(t *testing.T) {
	a, b := tcpPair(t)
	// Small socket buffers: each splice then moves a few KiB, often less
	// than a page, so the pipe is often still full when send comes back
	// to vmsplice.
	_ = a.(*net.TCPConn).SetWriteBuffer(16384)
	_ = b.(*net.TCPConn).SetReadBuffer(16384)
	sp := splicerOn(t, a)
	val := make([]byte, 6<<20+5)
	for i := range val {
		val[i] = byte(i ^ i>>9)
	}
	_ = a.SetWriteDeadline(time.Now().Add(20 * time.Second))
	done := make(chan error, 1)
	go func() { done <- sp.send([][]byte{val[:5<<20+1], val[5<<20+1:]}) }()
	time.Sleep(100 * time.Millisecond) // the socket fills meanwhile
	got := make([]byte, len(val))
	for off := 0; off < len(got); {
		step := 64 << 10
		if off < 2<<20 {
			step = 1000 // small reads free the socket a little at a time
		}
		n, err := b.Read(got[off:min(len(got), off+step)])
		if err != nil {
			t.Fatal(err)
		}
		off += n
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, val) {
		t.Fatal("bytes differ")
	}
}

// TestSplicerFullPipe: mapping into a full pipe returns at once with
// nothing mapped, instead of waiting for a reader of the pipe (whose only
// reader is the same loop: a send blocked forever that way).
func TestSplicerFullPipe(t *testing.T) {
	a, _ := tcpPair(t)
	sp := splicerOn(t, a)
	val := make([]byte, 2*splicePipe)
	rest, n, err := sp.fill([][]byte{val})
	if err != nil || n == 0 || n > splicePipe || len(rest) != 1 || len(rest[0]) != len(val)-n {
		t.Fatalf("first fill: %d bytes mapped, %d values left, %v", n, len(rest), err)
	}
	done := make(chan int, 1)
	go func() {
		_, n, err := sp.fill(rest)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	select {
	case n := <-done:
		if n != 0 {
			t.Fatalf("a full pipe took %d more bytes", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fill blocked on a full pipe")
	}
}

// TestSplicerDeadline: a peer that reads nothing fills the socket; the
// send then fails at the connection's write deadline instead of hanging.
func TestSplicerDeadline(t *testing.T) {
	a, _ := tcpPair(t)
	sp := splicerOn(t, a)
	_ = a.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	done := make(chan error, 1)
	go func() { done <- sp.send([][]byte{make([]byte, 64<<20)}) }()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("send to a peer that reads nothing: %v, want the deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("send ignored the write deadline")
	}
}
