package pdu_test

import (
	"bytes"
	"testing"

	"github.com/kvtier/kvtier/nof/pdu"
)

// gated hands out at most avail bytes of data in total.
type gated struct {
	data  []byte
	avail int
}

func (g *gated) Read(p []byte) (int, error) {
	n := copy(p, g.data[:g.avail])
	g.data, g.avail = g.data[n:], g.avail-n
	return n, nil
}

// NextBuffered says whether the next whole PDU (after skipping what is
// left of the current one) is already buffered, and never reads.
func TestNextBuffered(t *testing.T) {
	o := pdu.Options{HDGST: true, DDGST: true}
	var b []byte
	b = (&pdu.ICReq{DGST: 3}).AppendPDU(b, o)
	b = (&pdu.CapsuleCmd{Cmd: pdu.Command{CID: 1}, Data: bytes.Repeat([]byte{1}, 100)}).AppendPDU(b, o)
	b = (&pdu.H2CData{CCCID: 1, TTAG: 5, Last: true, Data: bytes.Repeat([]byte{2}, 4096)}).AppendPDU(b, o)
	b = (&pdu.CapsuleCmd{Cmd: pdu.Command{CID: 2}}).AppendPDU(b, o)
	src := &gated{data: b, avail: len(b) - 10} // the last command is short of 10 bytes
	r := pdu.NewReader(src, pdu.ReaderConfig{Side: pdu.ControllerSide})
	if r.NextBuffered() {
		t.Fatal("NextBuffered before anything was read")
	}
	if f, err := r.Next(); err != nil || f.Type != pdu.TypeICReq {
		t.Fatalf("icreq: %v", err)
	}
	r.SetNegotiated(o)
	if !r.NextBuffered() {
		t.Fatal("command 1 is buffered")
	}
	if f, err := r.Next(); err != nil || f.Command().CID != 1 {
		t.Fatalf("cmd 1: %v", err)
	}
	if !r.NextBuffered() { // past command 1's unread data and digest
		t.Fatal("H2CData is buffered")
	}
	f, err := r.Next()
	if err != nil || f.Type != pdu.TypeH2CData {
		t.Fatalf("h2c: %v", err)
	}
	if r.NextBuffered() {
		t.Fatal("command 2 is not all here yet")
	}
	if err := r.ReadData(make([]byte, f.DataLen)); err != nil {
		t.Fatal(err)
	}
	if r.NextBuffered() || src.avail != 0 || len(src.data) != 10 {
		t.Fatalf("NextBuffered read from the stream (avail %d, left %d)", src.avail, len(src.data))
	}
	src.avail = 10
	if f, err := r.Next(); err != nil || f.Command().CID != 2 {
		t.Fatalf("cmd 2: %v", err)
	}
}
