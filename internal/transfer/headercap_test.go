package transfer

import (
	"bytes"
	"testing"
)

// TestHeaderCap: the read of a response header takes only the header from
// the socket before a READ whose payload goes straight into the caller's
// buffer (single or batch frame), a bounded amount when nothing is
// outstanding yet, and whatever has arrived before anything else.
func TestHeaderCap(t *testing.T) {
	big, small := make([]byte, receiveDirectMin), make([]byte, receiveDirectMin-1)
	cases := []struct {
		name  string
		queue []*slice
		want  int
	}{
		{"nothing outstanding", nil, headerCapUnknown},
		{"large READ", []*slice{{op: Read, buf: big}}, responseHeaderLen},
		{"small READ", []*slice{{op: Read, buf: small}}, 0},
		{"WRITE", []*slice{{op: Write, buf: big}}, 0},
		{"batch READ, large first extent", []*slice{{op: opBatchRead, ext: []*slice{{op: Read, buf: big}, {op: Read, buf: small}}}}, responseHeaderLen},
		{"batch READ, small first extent", []*slice{{op: opBatchRead, ext: []*slice{{op: Read, buf: small}, {op: Read, buf: big}}}}, 0},
		{"batch WRITE", []*slice{{op: opBatchWrite, ext: []*slice{{op: Write, buf: big}}}}, 0},
		{"only the head counts", []*slice{{op: Write, buf: big}, {op: Read, buf: big}}, 0},
	}
	for _, tc := range cases {
		c := &clientConn{queue: tc.queue}
		if got := c.headerCap(); got != tc.want {
			t.Errorf("%s: headerCap %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestCapReader: a bounded read takes at most its bound, an unbounded one
// what the reader gives.
func TestCapReader(t *testing.T) {
	src := bytes.Repeat([]byte("x"), 100)
	cr := capReader{r: bytes.NewReader(src), max: responseHeaderLen}
	buf := make([]byte, 64)
	if n, err := cr.Read(buf); n != responseHeaderLen || err != nil {
		t.Fatalf("bounded read: %d, %v; want %d", n, err, responseHeaderLen)
	}
	cr.max = 0
	if n, err := cr.Read(buf); n != 64 || err != nil {
		t.Fatalf("unbounded read: %d, %v; want 64", n, err)
	}
}
