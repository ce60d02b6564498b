package resp

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"
)

// sendInTwo sends SET key val in two parts, the first part of the value
// then, after pause, the rest, and returns the reply.
func sendInTwo(t *testing.T, c *tclient, key string, val []byte, split int, pause time.Duration) string {
	t.Helper()
	_, _ = fmt.Fprintf(c.bw, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, len(val))
	_, _ = c.bw.Write(val[:split])
	if err := c.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	_, _ = c.bw.Write(val[split:])
	_, _ = c.bw.WriteString("\r\n")
	if err := c.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := c.read()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSetWatchedThroughBounce: a long SET of the value a key holds is
// compared through the bounce buffer and stores nothing; one whose bytes
// differ only after a part already compared (and dropped) stores exactly
// its own bytes: the dropped part is taken back from the stored value.
func TestSetWatchedThroughBounce(t *testing.T) {
	s, addr, _ := startServerOn(t, Config{}, true)
	c := dial(t, addr)
	defer c.nc.Close()
	v := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if got := c.do("SET", "k", string(v)); got != "+OK" {
		t.Fatal(got)
	}
	before := s.watchSame.Load()
	if got := sendInTwo(t, c, "k", v, 3*watchChunk+17, 50*time.Millisecond); got != "+OK" {
		t.Fatal(got)
	}
	if s.watchSame.Load() != before+1 {
		t.Fatalf("the equal SET was not decided through the bounce buffer (%d -> %d)", before, s.watchSame.Load())
	}
	for _, at := range []int{0, watchChunk - 1, 5*watchChunk + 3, len(v) - 1} {
		w := bytes.Clone(v)
		w[at] ^= 0xff
		if got := sendInTwo(t, c, "k", w, min(at+1, len(w)-1), 20*time.Millisecond); got != "+OK" {
			t.Fatalf("differs at %d: %s", at, got)
		}
		if got := c.do("GET", "k"); got != string(w) {
			t.Fatalf("differs at %d: GET answered other bytes (first difference at %d)", at, firstDiff([]byte(got), w))
		}
		if got := c.do("SET", "k", string(v)); got != "+OK" {
			t.Fatal(got)
		}
	}
	if s.watching.n.Load() != 0 {
		t.Fatalf("%d watches left registered", s.watching.n.Load())
	}
}

// TestSetWatchedPastLease: a client that pauses in the middle of a value
// for longer than the read lease leaves: the watch stops reading segment
// memory before the lease ends (taking back the prefix it dropped), so
// the SET still stores exactly the bytes sent.
func TestSetWatchedPastLease(t *testing.T) {
	const lease = 1500 * time.Millisecond // watches stop reading 1 s before its end
	_, addr, _ := startServerLease(t, Config{}, true, lease)
	c := dial(t, addr)
	defer c.nc.Close()
	v := bytes.Repeat([]byte("v"), 1<<20)
	w := bytes.Clone(v)
	for i := 1 << 19; i < len(w); i++ {
		w[i] = 'w' // differs in the second half only
	}
	for _, val := range [][]byte{w, v} {
		if got := c.do("SET", "k", string(v)); got != "+OK" {
			t.Fatal(got)
		}
		if got := c.do("GET", "k"); len(got) != len(v) { // a fresh lease
			t.Fatalf("GET: %d bytes", len(got))
		}
		if got := sendInTwo(t, c, "k", val, 1<<19, lease+300*time.Millisecond); got != "+OK" {
			t.Fatal(got)
		}
		if got := c.do("GET", "k"); got != string(val) {
			t.Fatalf("GET answered other bytes (first difference at %d)", firstDiff([]byte(got), val))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestAllocsPerShortCommand counts the heap allocations of the whole
// process per 4 KiB GET and SET of a stored value (the SET stores nothing),
// requests sent one at a time over TCP as redis-benchmark -P 1 does.
func TestAllocsPerShortCommand(t *testing.T) {
	_, addr, _ := startServerOn(t, Config{}, true)
	c := dial(t, addr)
	defer c.nc.Close()
	v := bytes.Repeat([]byte("x"), 4096)
	if got := c.do("SET", "key:__rand_int__", string(v)); got != "+OK" {
		t.Fatal(got)
	}
	get := encode([][]byte{[]byte("GET"), []byte("key:__rand_int__")})
	set := encode([][]byte{[]byte("SET"), []byte("key:__rand_int__"), v})
	for _, tc := range []struct {
		name  string
		req   []byte
		reply int
		max   float64
	}{
		// GET: the key as a string (maps of the SDK and of this
		// package), the checksum's state in crc32c.CopyUpdate; SET: the
		// key as a string. The rest is the process's background work
		// (heartbeats) spread over the commands.
		{"GET", get, len(fmt.Sprintf("$%d\r\n", len(v))) + len(v) + 2, 3},
		{"SET", set, len("+OK\r\n"), 2},
	} {
		reply := make([]byte, tc.reply)
		run := func() {
			if _, err := c.nc.Write(tc.req); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c.nc, reply); err != nil {
				t.Fatal(err)
			}
		}
		for range 100 {
			run()
		}
		const n = 2000
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			run()
		}
		runtime.ReadMemStats(&after)
		per := float64(after.Mallocs-before.Mallocs) / n
		t.Logf("%s 4 KiB: %.2f allocations per command (the whole process)", tc.name, per)
		if per > tc.max {
			t.Errorf("%s: %.2f allocations per command, want at most %v", tc.name, per, tc.max)
		}
	}
}
