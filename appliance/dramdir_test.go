package appliance

import (
	"fmt"
	"sync"
	"testing"
)

// TestDramDirOverlaps: a commit drops every entry it overlaps (their space
// was freed and given to it), a free drops the entry at its offset, and
// entries beside the new one stay.
func TestDramDirOverlaps(t *testing.T) {
	d := newDramDir()
	d.commit("s", dramEntry{off: 0, size: 100, key: "a"})
	d.commit("s", dramEntry{off: 128, size: 100, key: "b"})
	d.commit("s", dramEntry{off: 256, size: 64, key: "c"})
	d.commit("s", dramEntry{off: 320, size: 64, key: "d"})
	d.commit("s", dramEntry{off: 64, size: 128, key: "e"}) // overlaps a and b
	d.free("s", 320)
	d.free("s", 999) // nothing there
	got := []string{}
	for _, e := range d.snapshot()["s"] {
		got = append(got, fmt.Sprintf("%s@%d", e.key, e.off))
	}
	if want := "[e@64 c@256]"; fmt.Sprint(got) != want {
		t.Fatalf("directory %v, want %s", got, want)
	}
	d.clear()
	if d.len() != 0 {
		t.Fatal("clear left entries")
	}
}

// TestDramDirConcurrent: commits, frees and snapshots from several
// goroutines (run under -race); entries never overlap afterwards.
func TestDramDirConcurrent(t *testing.T) {
	d := newDramDir()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				off := uint64((i*7+g*13)%500) * 64
				switch i % 3 {
				case 0, 1:
					d.commit(fmt.Sprint("s", g%2), dramEntry{off: off, size: uint64(64 * (1 + i%4)), key: fmt.Sprint(g, i)})
				case 2:
					d.free(fmt.Sprint("s", g%2), off)
				}
				if i%100 == 0 {
					_ = d.snapshot()
				}
			}
		})
	}
	wg.Wait()
	for seg, es := range d.snapshot() {
		for i := 1; i < len(es); i++ {
			if es[i-1].off+es[i-1].size > es[i].off {
				t.Fatalf("%s: entries %+v and %+v overlap", seg, es[i-1], es[i])
			}
		}
	}
}
