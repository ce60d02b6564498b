package resp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
)

// corrupt flips one byte of key's stored value in the appliance's segment
// memory (what a stray write or a reuse of the extent would do) and
// returns a function that flips it back.
func corrupt(t *testing.T, a *appliance.Appliance, key string, at int) func() {
	t.Helper()
	rl, err := a.Client().Query(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rl.Replicas {
		if r.Type != kvtierpb.ReplicaType_MEMORY {
			continue
		}
		mem := a.SegmentMemory(r.Segment)
		if mem == nil {
			t.Fatalf("segment %s of %s not in this appliance", r.Segment, key)
		}
		b := &mem[r.Offset+uint64(at)]
		*b ^= 0x5a
		return func() { *b ^= 0x5a }
	}
	t.Fatalf("%s has no MEMORY replica", key)
	return nil
}

// TestGetInPlaceChecksFirstForShortValues: a short value whose stored
// bytes changed is a miss, as through the copying path (never the wrong
// bytes), and the connection stays usable.
func TestGetInPlaceChecksFirstForShortValues(t *testing.T) {
	_, addr, a := startServerOn(t, Config{}, true)
	c := dial(t, addr)
	defer c.nc.Close()
	v := strings.Repeat("s", 4096)
	if got := c.do("SET", "small", v); got != "+OK" {
		t.Fatal(got)
	}
	if got := c.do("GET", "small"); got != v {
		t.Fatalf("GET small: %.40q", got)
	}
	undo := corrupt(t, a, "small", 1000)
	if got := c.do("GET", "small"); got != "(nil)" {
		t.Fatalf("GET of a corrupted short value: %.40q, want (nil)", got)
	}
	if got := c.do("PING"); got != "+PONG" {
		t.Fatalf("connection after the miss: %q", got)
	}
	undo()
	if got := c.do("GET", "small"); got != v {
		t.Fatalf("GET after the bytes were restored: %.40q", got)
	}
}

// TestGetInPlaceLongValueFailsAfterSending: a long value is sent from
// segment memory and checked afterwards. When its bytes changed, the
// reply is never completed (no final CRLF): the client sees the
// connection close and never takes the bytes as a value. The next GET of
// the key goes through the copying path and answers a miss.
func TestGetInPlaceLongValueFailsAfterSending(t *testing.T) {
	_, addr, a := startServerOn(t, Config{}, true)
	c := dial(t, addr)
	defer c.nc.Close()
	v := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if got := c.do("SET", "big", string(v)); got != "+OK" {
		t.Fatal(got)
	}
	if got := c.do("GET", "big"); got != string(v) {
		t.Fatalf("GET big: %d bytes", len(got))
	}
	corrupt(t, a, "big", 500000)
	c.send("GET", "big")
	_ = c.bw.Flush()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(c.br)
	if err != nil {
		t.Fatalf("reading the failed reply: %v", err)
	}
	if want := "$1048576\r\n"; len(rest) != len(want)+len(v) || string(rest[:len(want)]) != want {
		t.Fatalf("failed reply: %d bytes (want exactly the header and the value, no CRLF) %.20q", len(rest), rest)
	}
	d := dial(t, addr)
	defer d.nc.Close()
	if got := d.do("GET", "big"); got != "(nil)" {
		t.Fatalf("GET after a failed check: %.40q, want (nil)", got)
	}
	// SET of the original value compares with the stored (changed) bytes,
	// finds them different and replaces them.
	if got := d.do("SET", "big", string(v)); got != "+OK" {
		t.Fatal(got)
	}
	if got := d.do("GET", "big"); got != string(v) {
		t.Fatalf("GET after SET replaced the corrupted value: %d bytes", len(got))
	}
}

// TestSetInPlaceComparesBytes: SET of a value of the size the key holds
// compares with the stored bytes: equal is kept (no put: the replica
// stays where it was), different is replaced.
func TestSetInPlaceComparesBytes(t *testing.T) {
	_, addr, a := startServerOn(t, Config{}, true)
	c := dial(t, addr)
	defer c.nc.Close()
	for _, size := range []int{100, 4096, 200 << 10} {
		v := bytes.Repeat([]byte{'v'}, size)
		if got := c.do("SET", "k", string(v)); got != "+OK" {
			t.Fatal(got)
		}
		before, err := a.Client().Query(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.do("SET", "k", string(v)); got != "+OK" {
			t.Fatal(got)
		}
		after, err := a.Client().Query(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if before.Replicas[0].Offset != after.Replicas[0].Offset || before.Replicas[0].Segment != after.Replicas[0].Segment {
			t.Fatalf("size %d: SET of the same bytes wrote a new object", size)
		}
		v[size/2] = 'w'
		if got := c.do("SET", "k", string(v)); got != "+OK" {
			t.Fatal(got)
		}
		if got := c.do("GET", "k"); got != string(v) {
			t.Fatalf("size %d: GET after SET of other bytes returned the old value", size)
		}
	}
}

// TestGetInPlaceSlowReader: a client that pipelines GETs and does not
// read its replies fills its socket; the front end copies what the socket
// does not take and waits for the client outside the key's lock, so a SET
// of the same key from another connection completes meanwhile. Every
// reply, read afterwards, is one whole value. Long values (sent from
// segment memory) and short ones (through the reply buffer, flushed every
// 64 KiB) both.
func TestGetInPlaceSlowReader(t *testing.T) {
	for _, tc := range []struct {
		size, gets int
	}{{1 << 20, 24}, {4 << 10, 8000}} { // 24 and 32 MiB: more than the socket buffers hold
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) { testSlowReader(t, tc.size, tc.gets) })
	}
}

func testSlowReader(t *testing.T, size, gets int) {
	_, addr, _ := startServerOn(t, Config{}, true)
	old := bytes.Repeat([]byte("o"), size)
	nu := bytes.Repeat([]byte("n"), size)
	w := dial(t, addr)
	defer w.nc.Close()
	if got := w.do("SET", "k", string(old)); got != "+OK" {
		t.Fatal(got)
	}
	slow := dial(t, addr)
	defer slow.nc.Close()
	for range gets {
		slow.send("GET", "k")
	}
	if err := slow.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the server fill the socket
	done := make(chan string, 1)
	go func() {
		c := dial(t, addr)
		defer c.nc.Close()
		c.send("SET", "k", string(nu))
		_ = c.bw.Flush()
		r, err := c.read()
		if err != nil {
			r = err.Error()
		}
		done <- r
	}()
	select {
	case got := <-done:
		if got != "+OK" {
			t.Fatalf("SET while a slow reader's GETs are pending: %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SET blocked by a client that does not read its GET replies")
	}
	for i := range gets {
		got, err := slow.read()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if got != string(old) && got != string(nu) {
			t.Fatalf("reply %d: %d bytes, neither value", i, len(got))
		}
	}
}

// TestSetComparedWhileArrivingThenReplaced: a SET's value is compared
// with the stored bytes while it arrives; when another connection
// replaces the key midway (with bytes that differ only in the part
// already compared), the comparison no longer counts and the SET stores
// its value.
func TestSetComparedWhileArrivingThenReplaced(t *testing.T) {
	_, addr, _ := startServerOn(t, Config{}, true)
	v := bytes.Repeat([]byte("v"), 1<<20)
	w := bytes.Clone(v)
	for i := range 1 << 19 {
		w[i] = 'w' // differs from v in the first half only
	}
	a := dial(t, addr)
	defer a.nc.Close()
	if got := a.do("SET", "big", string(v)); got != "+OK" {
		t.Fatal(got)
	}
	// Half of SET big v, then wait while the server compares it.
	_, _ = fmt.Fprintf(a.bw, "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n", len(v))
	_, _ = a.bw.Write(v[:1<<19])
	if err := a.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	b := dial(t, addr)
	defer b.nc.Close()
	if got := b.do("SET", "big", string(w)); got != "+OK" {
		t.Fatal(got)
	}
	_, _ = a.bw.Write(v[1<<19:])
	_, _ = a.bw.WriteString("\r\n")
	if err := a.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, err := a.read(); got != "+OK" || err != nil {
		t.Fatalf("SET: %q %v", got, err)
	}
	if got := b.do("GET", "big"); got != string(v) {
		t.Fatalf("GET after the second SET ended last: %.20q..., want v", got)
	}
}
