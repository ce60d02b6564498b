package resp

import (
	"bytes"
	"fmt"
	"io"
	"os"
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

// chunkedSource delivers a request in pieces of pseudo-random sizes, both
// to the reader's buffer (Read) and to readWatched (readLong), and can
// stand for what happens while a value arrives: a removal of the key
// (keepAll) after a given number of long reads, a lease deadline firing
// once.
type chunkedSource struct {
	data     []byte
	rnd      uint64
	reads    int
	keepAt   int // keepAll on this long read (0: never)
	expireAt int // answer os.ErrDeadlineExceeded on this long read (0: never)
	table    *watchTable
	kept     bool
}

func (s *chunkedSource) next(max int) int {
	s.rnd = s.rnd*6364136223846793005 + 1442695040888963407
	return 1 + int(s.rnd>>33)%max
}

func (s *chunkedSource) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.data[:min(len(s.data), s.next(64<<10))])
	s.data = s.data[n:]
	return n, nil
}

func (s *chunkedSource) readLong(p []byte, until time.Time) (int, error) {
	s.reads++
	if s.reads == s.keepAt {
		s.table.keepAll("k")
		s.kept = true
	}
	if s.reads == s.expireAt && !until.IsZero() {
		s.kept = true
		return 0, os.ErrDeadlineExceeded
	}
	return s.Read(p)
}

func (s *chunkedSource) endLong() {}

var _ longReader = (*chunkedSource)(nil)

// FuzzReadWatched: whatever the pieces the value arrives in, where it
// differs from the stored bytes, and when a removal or the lease stops the
// comparison, a watched SET either is found equal (only when it is, and
// nothing stopped the comparison) or has its whole value in its buffer,
// and no watch stays registered.
func FuzzReadWatched(f *testing.F) {
	f.Add(uint32(1<<20), int32(-1), uint8(0), uint8(0), uint64(1))
	f.Add(uint32(1<<20), int32(0), uint8(0), uint8(0), uint64(2))
	f.Add(uint32(300000), int32(299999), uint8(3), uint8(0), uint64(3))
	f.Add(uint32(200000), int32(150000), uint8(0), uint8(2), uint64(4))
	f.Add(uint32(16<<10), int32(-1), uint8(1), uint8(1), uint64(5))
	f.Fuzz(func(t *testing.T, size uint32, diffAt int32, keepAt, expireAt uint8, seed uint64) {
		n := bigArg + int(size%(1<<20))
		val := make([]byte, n)
		for i := range val {
			val[i] = byte(i*7 + i>>9)
		}
		stored := bytes.Clone(val)
		if diffAt >= 0 {
			stored[int(diffAt)%n] ^= 0x40
		}
		var table watchTable
		src := &chunkedSource{rnd: seed, keepAt: int(keepAt), expireAt: int(expireAt), table: &table,
			data: append(encode([][]byte{[]byte("SET"), []byte("k"), val}), encode([][]byte{[]byte("PING")})...)}
		var pool bufPool
		r := newReader(src, 64, 1<<21, &pool)
		r.watch = func(args [][]byte, nargs int64, dst []byte) *watchState {
			w := &watchState{key: "k", seg: stored, dst: dst, same: true, until: time.Now().Add(time.Hour)}
			table.add(w)
			return w
		}
		args, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		equal := bytes.Equal(stored, val)
		switch {
		case r.lost:
			t.Fatal("lost the value under a running lease")
		case r.compared && r.same:
			if !equal || src.kept {
				t.Fatalf("found equal (stored equal %v, comparison stopped %v)", equal, src.kept)
			}
		case r.compared && equal:
			t.Fatal("found different bytes that are equal")
		default:
			if !bytes.Equal(args[2], val) {
				t.Fatalf("the value buffer differs from the value at %d", firstDiff(args[2], val))
			}
		}
		if table.n.Load() != 0 {
			t.Fatalf("%d watches left", table.n.Load())
		}
		if args, err := r.next(); err != nil || string(args[0]) != "PING" {
			t.Fatalf("next command: %q %v", args, err)
		}
	})
}
