package master

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

func TestCheapestRange(t *testing.T) {
	mv := func(off, end, bytes uint64) roomItem {
		return roomItem{off: off, end: end, bytes: bytes, movable: true}
	}
	fixed := func(off, end uint64) roomItem { return roomItem{off: off, end: end} }
	for _, tc := range []struct {
		name     string
		items    []roomItem
		size     uint64
		total    uint64
		wantOK   bool
		wantOffs []uint64 // offsets of the items of the range
	}{
		{"one object in a gap", []roomItem{mv(0, 10, 10), mv(20, 30, 10), mv(40, 50, 10)}, 25, 50, true, []uint64{20}},
		{"cheapest of two, free tail included", []roomItem{mv(0, 30, 30), fixed(30, 40), mv(40, 45, 5), mv(45, 50, 5)}, 10, 60, true, []uint64{45}},
		{"fixed items split the segment", []roomItem{mv(0, 10, 10), fixed(10, 20), mv(20, 30, 10), fixed(30, 40)}, 15, 40, false, nil},
		{"a run of several", []roomItem{fixed(0, 10), mv(10, 20, 10), mv(20, 30, 10), mv(30, 40, 10), fixed(40, 50)}, 30, 50, true, []uint64{10, 20, 30}},
		{"run up to the end of the segment", []roomItem{fixed(0, 40), mv(40, 50, 10)}, 20, 60, true, []uint64{40}},
		{"larger than the segment", []roomItem{mv(0, 10, 10)}, 20, 10, false, nil},
		{"the bytes evicted count, not the span", []roomItem{mv(0, 10, 10), mv(10, 20, 5), mv(40, 41, 100)}, 30, 60, true, []uint64{10}},
		{"two cheap ones over one dear one", []roomItem{mv(0, 10, 1), mv(10, 20, 1), mv(20, 30, 50), fixed(30, 40)}, 20, 40, true, []uint64{0, 10}},
	} {
		run, _, ok := cheapestRange(tc.items, tc.size, tc.total)
		var offs []uint64
		for _, it := range run {
			offs = append(offs, it.off)
		}
		if ok != tc.wantOK || fmt.Sprint(offs) != fmt.Sprint(tc.wantOffs) {
			t.Errorf("%s: got %v ok=%v, want %v ok=%v", tc.name, offs, ok, tc.wantOffs, tc.wantOK)
		}
	}
}

func TestWithBlockers(t *testing.T) {
	items := []roomItem{{off: 30, end: 40, movable: true}, {off: 0, end: 10, movable: true}}
	free := []extent{{off: 10, size: 10}, {off: 50, size: 10}}
	got := withBlockers(items, free, 70)
	// [0,10) item, [10,20) free, [20,30) blocker, [30,40) item, [40,50)
	// blocker, [50,60) free, [60,70) blocker.
	want := "[{0 10 true} {20 30 false} {30 40 true} {40 50 false} {60 70 false}]"
	var s []string
	for _, it := range got {
		s = append(s, fmt.Sprintf("{%d %d %v}", it.off, it.end, it.movable))
	}
	if fmt.Sprint(s) != want {
		t.Fatalf("got %v, want %v", s, want)
	}
}

// TestLargePutEvictsOneRange: a segment full of small evictable objects
// whose lease order is scattered over its addresses. A put four times their
// size used to free four objects in lease order, find no free extent large
// enough and fail; now it evicts one contiguous range for itself and
// succeeds, and objects outside that range stay.
func TestLargePutEvictsOneRange(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff, EvictionRatio: 0.01})
	mountMem(t, m, "A", "A/0", 640)
	fill(t, m, 10, nil) // k00..k09 at offsets 0, 64, ..., 576
	// Lease order: even keys oldest, so a pass in lease order frees
	// scattered 64-byte holes.
	for _, i := range []int{0, 2, 4, 6, 8, 1, 3, 5, 7, 9} {
		fc.Advance(time.Millisecond)
		if _, err := m.GetReplicaList(ctx, "r", "", fmt.Sprintf("k%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	fc.Advance(DefaultLeaseTTL + time.Second)
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "big", Size: 256, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatalf("a 256-byte put into a segment of evictable 64-byte objects: %v", err)
	}
	if err := m.PutEnd(ctx, "w", "", "big"); err != nil {
		t.Fatal(err)
	}
	left := present(m, 10)
	if len(left) < 3 {
		t.Fatalf("evicted far more than one range: %v left", left)
	}
	// Still refused when nothing can go: every object leased.
	for _, i := range left {
		if _, err := m.GetReplicaList(ctx, "r", "", fmt.Sprintf("k%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.GetReplicaList(ctx, "r", "", "big"); err != nil {
		t.Fatal(err)
	}
	_, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "big2", Size: 256, Config: PutConfig{Replicas: 1}})
	wantCode(t, err, kverr.NoAvailableHandle)
}

// TestCheapestRangeMatchesBruteForce checks cheapestRange against trying
// every run, on random layouts.
func TestCheapestRangeMatchesBruteForce(t *testing.T) {
	r := rng(12345)
	for iter := 0; iter < 3000; iter++ {
		var items []roomItem
		off := uint64(0)
		for n := int(r.next() % 12); n > 0; n-- {
			off += r.next() % 3 * 8 // a free gap, sometimes
			size := 8 + r.next()%4*8
			items = append(items, roomItem{off: off, end: off + size, bytes: 1 + r.next()%50, movable: r.next()%4 != 0})
			off += size
		}
		total := off + r.next()%3*8
		size := 8 + r.next()%10*8
		run, cost, ok := cheapestRange(items, size, total)
		var bestCost uint64
		bestOK := false
		for i := range items {
			var sum uint64
			for j := i; j < len(items) && items[j].movable; j++ {
				sum += items[j].bytes
				lo, hi := uint64(0), total
				if i > 0 {
					lo = items[i-1].end
				}
				if j+1 < len(items) {
					hi = items[j+1].off
				}
				if hi-lo >= size && (!bestOK || sum < bestCost) {
					bestCost, bestOK = sum, true
				}
			}
		}
		if ok != bestOK || (ok && cost != bestCost) {
			t.Fatalf("iteration %d: %+v size %d total %d: got cost %d ok %v, brute force %d ok %v", iter, items, size, total, cost, ok, bestCost, bestOK)
		}
		if ok {
			var sum uint64
			for _, it := range run {
				if !it.movable {
					t.Fatalf("iteration %d: range holds an unmovable item", iter)
				}
				sum += it.bytes
			}
			if sum != cost {
				t.Fatalf("iteration %d: range costs %d, reported %d", iter, sum, cost)
			}
		}
	}
}

// TestOversizedPutEvictsNothing: a put larger than any MEMORY segment, or
// one that wants no MEMORY replica, is refused without an eviction pass
// (such a pass emptied DRAM and the put failed anyway).
func TestOversizedPutEvictsNothing(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff})
	mountMem(t, m, "A", "A/0", 640)
	fill(t, m, 10, nil)
	fc.Advance(DefaultLeaseTTL + time.Second)
	_, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "huge", Size: 641, Config: PutConfig{Replicas: 1}})
	wantCode(t, err, kverr.NoAvailableHandle)
	if !strings.Contains(err.Error(), "more than any MEMORY segment holds (the largest: 640)") {
		t.Fatalf("unclear refusal: %v", err)
	}
	_, err = m.PutStart(ctx, PutRequest{Client: "w", Key: "nof-only", Size: 64, Config: PutConfig{NOFReplicas: 1}})
	wantCode(t, err, kverr.NoAvailableHandle)
	if got := present(m, 10); len(got) != 10 || ctrOf(m, "evictions") != 0 {
		t.Fatalf("refused puts evicted objects: %d left, %d evictions", len(got), ctrOf(m, "evictions"))
	}
	// A put that fits after eviction still gets it.
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "fits", Size: 128, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatalf("a 128-byte put: %v", err)
	}
}
