package sockpoll

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestSpinReader: the spinning reader returns exactly the bytes sent,
// across writes that arrive while it spins and after it parked, reports
// EOF when the peer closes, and honours a read deadline while parked.
func TestReader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); srv <- c }()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	peer := <-srv
	r := NewReader(nc, 200*time.Microsecond)
	if _, ok := r.(*spinReader); !ok {
		t.Fatalf("a TCP connection got %T, want *spinReader", r)
	}
	want := bytes.Repeat([]byte("nvme-tcp"), 10000)
	go func() {
		for i, chunk := range [][]byte{want[:10], want[10:5000], want[5000:]} {
			if i == 2 {
				time.Sleep(20 * time.Millisecond) // long past the spin: the reader parks
			}
			peer.Write(chunk)
		}
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %v, equal %v", err, bytes.Equal(got, want))
	}
	nc.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := r.Read(got); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	nc.SetReadDeadline(time.Time{})
	peer.Close()
	if n, err := r.Read(got); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v", n, err)
	}
	if _, ok := NewReader(nc, 0).(*spinReader); ok {
		t.Fatal("spin 0 still spins")
	}
}
