package fastrpc

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/master"
)

// FuzzRequestFrame: any bytes either fail to parse or parse into a request
// that re-encodes to exactly the bytes consumed.
func FuzzRequestFrame(f *testing.F) {
	seed, _ := appendRequest(nil, kvtierpb.Master_GetReplicaList_FullMethodName, 1000, []byte{10, 1, 'k'})
	f.Add(seed)
	empty, _ := appendRequest(nil, "/x/y", 0, nil)
	f.Add(empty)
	f.Add([]byte("KVFQ\x00\x01\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00/"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		q, _, err := readRequest(r, nil, nil)
		if err != nil {
			return
		}
		again, err := appendRequest(nil, q.method, q.timeout, q.payload)
		if err != nil {
			t.Fatalf("parsed request does not re-encode: %v", err)
		}
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("re-encoded %x, consumed %x", again, b[:len(again)])
		}
	})
}

// FuzzResponseHeader: a header that parses has a known status, zero
// reserved bytes and a bounded length.
func FuzzResponseHeader(f *testing.F) {
	f.Add(appendResponse(nil, statusOK, []byte("abc")))
	f.Add(appendResponse(nil, statusError, nil))
	f.Add([]byte("KVFS\x02\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, n, err := parseResponseHeader(b)
		if err != nil {
			return
		}
		if (st != statusOK && st != statusError) || n > MaxPayload || b[5]|b[6]|b[7] != 0 {
			t.Fatalf("accepted header %x: status %d length %d", b, st, n)
		}
	})
}

// FuzzServerCall: any method name and payload reaching a real master get
// an answer frame (never a panic), and the answer parses.
func FuzzServerCall(f *testing.F) {
	m, err := master.New(master.Config{})
	if err != nil {
		f.Fatal(err)
	}
	s := NewServer(&kvtierpb.Master_ServiceDesc, master.NewGRPCServer(m), nil)
	defer s.Close()
	for _, md := range kvtierpb.Master_ServiceDesc.Methods {
		f.Add("/kvtier.v1.Master/"+md.MethodName, []byte{10, 3, 'k', 'e', 'y'})
	}
	f.Add("/kvtier.v1.Master/PutStart", []byte{0x1a, 0x80})
	f.Add("nope", []byte(nil))
	f.Fuzz(func(t *testing.T, method string, payload []byte) {
		d := &decoder{request{method: method, payload: payload}}
		out := s.call(s.ctx, d.request, d.decode, nil, nil)
		st, n, err := parseResponseHeader(out)
		if err != nil || n != len(out)-respHeaderLen {
			t.Fatalf("answer %x: status %d length %d: %v", out[:min(len(out), 16)], st, n, err)
		}
	})
}

// FuzzClientHello: a client hello that parses has the magic, the version,
// zero reserved bytes and no flag but helloToken.
func FuzzClientHello(f *testing.F) {
	f.Add(hello[:])
	tok := append([]byte(nil), hello[:]...)
	tok[5] = helloToken
	f.Add(tok)
	f.Add([]byte("KVFR\x01\x02\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		flags, err := parseClientHello(b)
		if err != nil {
			return
		}
		if len(b) != helloLen || !bytes.Equal(b[:5], hello[:5]) || b[6] != 0 || b[7] != 0 || flags&^helloToken != 0 || flags != b[5] {
			t.Fatalf("accepted hello %x (flags %d)", b, flags)
		}
	})
}
