package pcapio

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteRead writes two interleaved synthetic connections and reads
// them back reassembled.
func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(f)
	a := w.NewConn(netip.MustParseAddrPort("127.0.0.1:1000"), netip.MustParseAddrPort("127.0.0.1:4420"))
	b := w.NewConn(netip.MustParseAddrPort("127.0.0.1:1001"), netip.MustParseAddrPort("127.0.0.1:4420"))
	big := bytes.Repeat([]byte("0123456789"), 10000) // split into several segments
	a.Data(0, []byte("hello"))
	b.Data(0, []byte("other"))
	a.Data(1, big)
	a.Data(0, []byte(" world"))
	if w.Err() != nil || f.Close() != nil {
		t.Fatal(w.Err())
	}
	conns, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 2 || string(conns[0].Stream[0]) != "hello world" || !bytes.Equal(conns[0].Stream[1], big) || string(conns[1].Stream[0]) != "other" {
		t.Fatalf("reassembly: %d conns", len(conns))
	}
	if conns[0].FrameAt(0, 6) <= conns[0].FrameAt(0, 0) {
		t.Fatal("frame numbers not increasing")
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing file read")
	}
	os.WriteFile(path, []byte("not a capture at all, no"), 0o644)
	if _, err := ReadFile(path); err == nil {
		t.Fatal("garbage accepted")
	}
}
