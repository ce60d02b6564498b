package transfer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// patternSource is a real ExtentSource computing its bytes (bucket b, offset
// o holds pattern(b<<32+o)); bucket 13 always fails its checksum and bucket
// 14 fails with an uncoded error. It stands in for package ssd.
type patternSource struct{}

var _ ExtentSource = patternSource{}

func (patternSource) ReadExtent(ctx context.Context, bucket, offset uint64, dst []byte) error {
	switch bucket {
	case 13:
		return kverr.New(kverr.ChecksumMismatch, "obj", "crc32c 1234 != 5678")
	case 14:
		return io.ErrUnexpectedEOF
	}
	fillPattern(dst, bucket<<32+offset)
	return nil
}

func TestExtentSource(t *testing.T) {
	srv, _, addr := serverEngine(t, "mem", 4096)
	if err := srv.RegisterSource("ssd0", patternSource{}); err != nil {
		t.Fatal(err)
	}
	cli := newEngine(t, Config{SliceSize: 64 << 10})
	for _, e := range []*Engine{cli, srv} { // over TCP, then locally
		dst := make([]byte, 300<<10) // larger than SliceSize: must travel whole
		if err := do1(t, e, Request{Op: Read, Endpoint: addr, Segment: "ssd0", Bucket: 2, Offset: 77, Buf: dst}); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, len(dst))
		fillPattern(want, 2<<32+77)
		if !bytes.Equal(dst, want) {
			t.Fatal("extent bytes differ")
		}
		err := do1(t, e, Request{Op: Read, Endpoint: addr, Segment: "ssd0", Bucket: 13, Buf: dst})
		wantCode(t, err, kverr.ChecksumMismatch, "crc32c 1234 != 5678")
		wantCode(t, do1(t, e, Request{Op: Read, Endpoint: addr, Segment: "ssd0", Bucket: 14, Buf: dst}), kverr.FileReadFail, "ssd0")
		wantCode(t, do1(t, e, Request{Op: Write, Endpoint: addr, Segment: "ssd0", Bucket: 2, Buf: dst}), kverr.InvalidParams, "read-only")
	}
	wantCode(t, do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "ssd0", Bucket: 2, Buf: make([]byte, MaxFrameLength+1)}), kverr.InvalidParams, "frame limit")
	if d := cli.Stats().ConnsDialed; d > uint64(DefaultConnsPerPeer) {
		t.Fatalf("source errors cost connections: %d", d)
	}
}

// rawConn dials addr for hand-made frames.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

func frame(op Op, id uint64, name string, bucket, off, length uint64) []byte {
	b := make([]byte, requestHeaderLen+len(name))
	putRequestHeader(b, reqHeader{op: op, nameLen: len(name), id: id, bucket: bucket, offset: off, length: length})
	copy(b[requestHeaderLen:], name)
	return b
}

func readResponse(t *testing.T, c net.Conn) (respHeader, string, []byte) {
	t.Helper()
	var hb [responseHeaderLen]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		t.Fatal(err)
	}
	h, err := parseResponseHeader(hb[:])
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, h.msgLen)
	payload := make([]byte, h.payloadLen)
	if _, err := io.ReadFull(c, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, payload); err != nil {
		t.Fatal(err)
	}
	return h, string(msg), payload
}

func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	var b [1]byte
	if n, err := c.Read(b[:]); err == nil {
		t.Fatalf("connection still open after a malformed frame (read %d bytes)", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("server neither answered nor closed the connection")
	}
}

func TestMalformedFramesFromRawSocket(t *testing.T) {
	srv, mem, addr := serverEngine(t, "seg", 1<<20)
	cli := newEngine(t, Config{})

	// A well-behaved raw client: OK read, refused write (payload consumed),
	// then another OK read on the same connection.
	good := rawConn(t, addr)
	good.Write(frame(Read, 1, "seg", 0, 10, 5))
	h, msg, payload := readResponse(t, good)
	if h.status != 0 || h.id != 1 || !bytes.Equal(payload, mem[10:15]) || msg != "" {
		t.Fatalf("raw read: %+v %q", h, msg)
	}
	good.Write(append(frame(Write, 2, "seg", 0, 1<<20-2, 4), 1, 2, 3, 4))
	h, msg, _ = readResponse(t, good)
	if kverr.Code(h.status) != kverr.InvalidParams || h.id != 2 || !bytes.Contains([]byte(msg), []byte(`"seg"`)) {
		t.Fatalf("raw OOB write: %+v %q", h, msg)
	}
	good.Write(frame(Read, 3, "other", 0, 0, 1))
	if h, msg, _ = readResponse(t, good); kverr.Code(h.status) != kverr.SegmentNotFound || h.id != 3 {
		t.Fatalf("raw unknown segment: %+v %q", h, msg)
	}

	bad := map[string][]byte{
		"bad magic":       append([]byte("GET / HTTP/1.1\r\n"), make([]byte, 40)...),
		"bad version":     func() []byte { b := frame(Read, 1, "seg", 0, 0, 1); b[4] = 9; return b }(),
		"bad op":          func() []byte { b := frame(Read, 1, "seg", 0, 0, 1); b[5] = 7; return b }(),
		"absurd length":   frame(Read, 1, "seg", 0, 0, 1<<40),
		"zero length":     frame(Read, 1, "seg", 0, 0, 0),
		"empty name":      frame(Read, 1, "", 0, 0, 1),
		"huge write":      frame(Write, 1, "seg", 0, 0, MaxFrameLength+1),
		"short then hang": frame(Read, 1, "seg", 0, 0, 1)[:20],
	}
	for name, b := range bad {
		c := rawConn(t, addr)
		c.Write(b)
		if name == "short then hang" {
			c.(*net.TCPConn).CloseWrite() // server sees EOF mid-header
		}
		expectClosed(t, c)
	}
	// The well-behaved connection and engine clients are unaffected.
	good.Write(frame(Read, 4, "seg", 0, 0, 3))
	if h, _, payload = readResponse(t, good); h.status != 0 || h.id != 4 || !bytes.Equal(payload, mem[:3]) {
		t.Fatalf("after malformed frames: %+v", h)
	}
	dst := make([]byte, 1000)
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: dst}); err != nil || !bytes.Equal(dst, mem[:1000]) {
		t.Fatalf("engine client after malformed frames: %v", err)
	}
	if m := srv.Stats().MalformedFrames; m != 7 {
		t.Fatalf("MalformedFrames = %d, want 7", m)
	}
}

// A server that answers garbage makes the client fail the requests on that
// connection with TRANSFER_FAIL, not hang or crash.
func TestClientRejectsBadResponses(t *testing.T) {
	for name, resp := range map[string]func(id uint64) []byte{
		"bad magic": func(uint64) []byte { return make([]byte, responseHeaderLen) },
		"wrong id": func(id uint64) []byte {
			b := make([]byte, responseHeaderLen)
			putResponseHeader(b, respHeader{op: Read, id: id + 5, payloadLen: 8})
			return b
		},
		"short payload": func(id uint64) []byte {
			b := make([]byte, responseHeaderLen)
			putResponseHeader(b, respHeader{op: Read, id: id, payloadLen: 4})
			return b
		},
		"eof": func(uint64) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				for { // every connection (the client retries once) gets the same
					c, err := l.Accept()
					if err != nil {
						return
					}
					hb := make([]byte, requestHeaderLen+1)
					if _, err := io.ReadFull(c, hb); err == nil {
						c.Write(resp(binary.BigEndian.Uint64(hb[8:])))
					}
					c.Close()
				}
			}()
			cli := newEngine(t, Config{ConnsPerPeer: 1, IOTimeout: 10 * time.Second})
			err = do1(t, cli, Request{Op: Read, Endpoint: l.Addr().String(), Segment: "x", Buf: make([]byte, 8)})
			wantCode(t, err, kverr.TransferFail, `"x"`)
			if d := cli.Stats().ConnsDialed; d != 2 {
				t.Fatalf("dialled %d connections, want 2 (one retry)", d)
			}
		})
	}
}

func TestUnregisterWaitsForInflight(t *testing.T) {
	srv, mem, addr := serverEngine(t, "seg", 1<<20)
	c := rawConn(t, addr)
	// Start a 64 KiB WRITE but send only half its payload: the server is now
	// reading into the segment and holds it.
	payload := bytes.Repeat([]byte{0xEE}, 64<<10)
	c.Write(frame(Write, 1, "seg", 0, 4096, uint64(len(payload))))
	c.Write(payload[:32<<10])
	for srv.Stats().ServedFrames < 1 {
		time.Sleep(time.Millisecond)
	}
	unregistered := make(chan error, 1)
	go func() { unregistered <- srv.UnregisterSegment("seg") }()
	select {
	case err := <-unregistered:
		t.Fatalf("UnregisterSegment returned (%v) while a WRITE was filling the segment", err)
	case <-time.After(200 * time.Millisecond):
	}
	c.Write(payload[32<<10:])
	if err := <-unregistered; err != nil {
		t.Fatal(err)
	}
	h, msg, _ := readResponse(t, c)
	if h.status != 0 {
		t.Fatalf("in-flight write refused: %q", msg)
	}
	if !bytes.Equal(mem[4096:4096+len(payload)], payload) {
		t.Fatal("in-flight write did not complete into the segment")
	}
	c.Write(frame(Read, 2, "seg", 0, 0, 1))
	if h, _, _ := readResponse(t, c); kverr.Code(h.status) != kverr.SegmentNotFound {
		t.Fatalf("after unregister: status %d", h.status)
	}
}

func FuzzFrame(f *testing.F) {
	f.Add(frame(Read, 1, "seg", 0, 0, 1))
	f.Add(frame(Write, 1<<60, "a-very-long-segment-name", 7, 1<<40, MaxFrameLength))
	f.Add(make([]byte, requestHeaderLen))
	f.Add([]byte("KVTQ"))
	f.Add(frame(opShm, 1, "shm", 0, 0, 0))
	f.Add(frame(opShm, 1, "shm", 0, 0, 5))
	r := make([]byte, responseHeaderLen)
	putResponseHeader(r, respHeader{op: Read, status: 9, id: 3, msgLen: 20})
	f.Add(r)
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := parseRequestHeader(b); err == nil {
			shm := h.op == opShm && h.length == 0 && h.bucket == 0 && h.offset == 0
			data := (h.op == Read || h.op == Write) && h.length >= 1 && h.length <= MaxFrameLength
			batch := h.op.isBatch() && checkBatchHeader(h) == nil
			if h.nameLen < 1 || h.nameLen > MaxNameLen || !(shm || data || batch) {
				t.Fatalf("accepted invalid header %+v", h)
			}
			out := make([]byte, requestHeaderLen)
			putRequestHeader(out, h)
			if !bytes.Equal(out, b[:requestHeaderLen]) {
				t.Fatalf("request header does not round-trip: % x vs % x", out, b[:requestHeaderLen])
			}
		} else if !errors.Is(err, errMalformed) {
			t.Fatalf("error not marked malformed: %v", err)
		}
		if h, err := parseResponseHeader(b); err == nil {
			if h.msgLen > maxMessageLen || h.payloadLen > MaxFrameLength || (h.op == opShm && h.payloadLen > maxShmAddrLen) {
				t.Fatalf("accepted invalid response %+v", h)
			}
			out := make([]byte, responseHeaderLen)
			putResponseHeader(out, h)
			if !bytes.Equal(out, b[:responseHeaderLen]) {
				t.Fatalf("response header does not round-trip")
			}
		} else if !errors.Is(err, errMalformed) {
			t.Fatalf("response error not marked malformed: %v", err)
		}
	})
}

// FuzzServe feeds arbitrary bytes to a serving connection: it must answer
// or close, never panic, and never write outside the segment.
func FuzzServe(f *testing.F) {
	f.Add(frame(Read, 1, "seg", 0, 0, 16))
	f.Add(append(frame(Write, 1, "seg", 0, 60, 4), 1, 2, 3, 4))
	f.Add(append(frame(Write, 1, "seg", 0, 62, 4), 1, 2, 3, 4))
	f.Add(append(frame(Read, 1, "seg", 0, 0, 1), frame(Read, 2, "nope", 0, 0, 1)...))
	f.Add([]byte("garbage"))
	f.Add(append(frame(opShm, 1, "shm", 0, 0, 0), frame(Read, 2, "seg", 0, 0, 1)...))
	f.Add(batchFrame(opBatchWrite, 1, []string{"seg"}, []batchExtent{{0, 0, 4}, {0, 62, 4}}, []byte("12345678")))
	f.Add(batchFrame(opBatchWrite, 1, []string{"seg"}, []batchExtent{{0, 0, 4}, {0, 60, 4}}, []byte("12345678")))
	f.Add(append(batchFrame(opBatchRead, 1, []string{"seg"}, []batchExtent{{0, 0, 4}, {0, 60, 4}}, nil), frame(Read, 2, "seg", 0, 0, 1)...))
	e, err := New(Config{IOTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	defer e.Close()
	backing := make([]byte, 64+64)
	seg := backing[:64:64]
	if err := e.RegisterSegment("seg", seg); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for i := range backing[64:] {
			backing[64+i] = 0xA5
		}
		serveInput(e, in)
		for i, v := range backing[64:] {
			if v != 0xA5 {
				t.Fatalf("byte %d past the segment was written", i)
			}
		}
	})
}

// A pooled connection whose peer restarted is stale; the request on it is
// retried once on a fresh connection instead of failing.
func TestStaleConnectionRetried(t *testing.T) {
	srv1, _, addr := serverEngine(t, "seg", 4096)
	cli := newEngine(t, Config{ConnsPerPeer: 1})
	buf := make([]byte, 100)
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: buf}); err != nil {
		t.Fatal(err)
	}
	srv1.Close()
	srv2 := newEngine(t, Config{})
	mem2 := bytes.Repeat([]byte{7}, 4096)
	if err := srv2.RegisterSegment("seg", mem2); err != nil {
		t.Fatal(err)
	}
	if _, err := srv2.Listen(addr); err != nil {
		t.Skipf("cannot rebind %s for the restarted server: %v", addr, err)
	}
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: buf}); err != nil {
		t.Fatalf("request on a stale connection was not retried: %v", err)
	}
	if !bytes.Equal(buf, mem2[:100]) {
		t.Fatal("read did not come from the restarted server")
	}
	if d := cli.Stats().ConnsDialed; d != 2 {
		t.Fatalf("dialled %d connections, want 2", d)
	}
}
