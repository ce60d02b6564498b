package pdu_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/pdu"
)

// TestWriterPush: Push returns without waiting for a peer that does not
// read (a TCP socket: one non-blocking writev, the rest in the
// background; a net.Pipe, which is no socket: all in the background), and
// every queued byte arrives in order once the peer reads. Queue alone
// writes nothing.
func TestWriterPush(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	for _, tc := range []struct {
		name   string
		w, r   net.Conn
		amount int
	}{{"tcp", server, client, 16 << 20}, {"pipe", p1, p2, 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			w := pdu.NewWriter(tc.w)
			var want []byte
			for len(want) < tc.amount {
				m := &pdu.C2HData{CCCID: uint16(len(want)), Last: true, Data: bytes.Repeat([]byte{byte(len(want) >> 12)}, 8192)}
				want = m.AppendPDU(want, pdu.Options{})
				if err := w.Queue(func(b []byte, o pdu.Options) ([]byte, error) { return m.AppendPDU(b, o), nil }); err != nil {
					t.Fatal(err)
				}
			}
			if w.Rounds() != 0 || w.Pending() != len(want) {
				t.Fatalf("Queue wrote: rounds %d, pending %d of %d", w.Rounds(), w.Pending(), len(want))
			}
			start := time.Now()
			w.Push() // nobody reads yet: more than any socket buffer
			if d := time.Since(start); d > time.Second {
				t.Fatalf("Push waited %v for a peer that does not read", d)
			}
			got := make([]byte, len(want))
			tc.r.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(tc.r, got); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("after Push the peer read %v, equal %v", err, bytes.Equal(got, want))
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
