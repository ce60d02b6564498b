package ssd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// filled is a tier holding three sealed buckets of four one-block objects
// (ids 1..3, created one second apart) plus an open bucket 4 with one object.
type filled struct {
	tr   *Tier
	dir  string
	m    *fakeMaster
	clk  interface{ Advance(time.Duration) }
	locs map[string]Location
	vals map[string][]byte
}

func newFilled(t *testing.T, cfg Config) *filled {
	t.Helper()
	m := newFakeMaster()
	clk := fakeClock()
	cfg.Dir = t.TempDir()
	cfg.BucketSize = 4 * Block
	cfg.Notifier = m
	cfg.Clock = clk
	cfg.Capacity = 1 << 30
	f := &filled{tr: openTier(t, cfg), dir: cfg.Dir, m: m, clk: clk, locs: map[string]Location{}, vals: map[string][]byte{}}
	for i := range 13 {
		key := fmt.Sprintf("b%d-o%d", i/4+1, i%4)
		f.vals[key] = value(uint64(i), Block-100)
		f.locs[key] = mustPut(t, f.tr, key, f.vals[key])
		if want := uint64(i/4 + 1); f.locs[key].Bucket != want {
			t.Fatalf("%s in bucket %d", key, f.locs[key].Bucket)
		}
		clk.Advance(time.Second / 4)
	}
	return f
}

// squeeze sets the capacity so that used space is just over the high
// watermark: one pass must evict exactly one full bucket to reach the low one.
func (f *filled) squeeze(t *testing.T) {
	t.Helper()
	used := f.tr.Stats().Used
	f.tr.SetCapacity(uint64(float64(used) / 0.96))
}

// checkGone asserts bucket id was deleted and every other object serves.
func (f *filled) checkGone(t *testing.T, id uint64) {
	t.Helper()
	data, meta := bucketFiles(f.dir, id)
	if fileExists(data) || fileExists(meta) {
		t.Fatalf("bucket %d files still on disk", id)
	}
	for key, loc := range f.locs {
		_, ok := f.tr.Lookup("t", key)
		if loc.Bucket == id {
			if ok {
				t.Fatalf("%s still indexed after its bucket was evicted", key)
			}
			err := f.tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, make([]byte, loc.Length))
			wantCode(t, err, kverr.ObjectNotFound)
			continue
		}
		if !ok {
			continue // evicted earlier
		}
		mustRead(t, f.tr, loc, f.vals[key])
	}
}

func TestEvictFIFODeletesOldestBucket(t *testing.T) {
	f := newFilled(t, Config{})
	// Reads do not matter to FIFO.
	mustRead(t, f.tr, f.locs["b1-o0"], f.vals["b1-o0"])
	f.squeeze(t)
	res, err := f.tr.EvictOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Evicted, []uint64{1}) || !slices.Equal(f.m.drops(), []uint64{1}) {
		t.Fatalf("evicted %v, master told %v; want [1]", res.Evicted, f.m.drops())
	}
	f.checkGone(t, 1)
	s := f.tr.Stats()
	if s.EvictedBuckets != 1 || s.Buckets != 3 || s.Objects != 9 || float64(s.Used) > s.LowWatermark*float64(s.Capacity) {
		t.Fatalf("stats after eviction %+v", s)
	}
	// Below the high watermark now: the next pass does nothing.
	if res, _ := f.tr.EvictOnce(context.Background()); len(res.Evicted) != 0 {
		t.Fatalf("second pass evicted %v", res.Evicted)
	}
}

func TestEvictLRUDeletesLeastRecentlyReadBucket(t *testing.T) {
	f := newFilled(t, Config{Policy: LRU})
	f.clk.Advance(time.Minute)
	mustRead(t, f.tr, f.locs["b1-o2"], f.vals["b1-o2"]) // bucket 1 is now the most recently used
	f.clk.Advance(time.Second)
	mustRead(t, f.tr, f.locs["b3-o0"], f.vals["b3-o0"])
	f.squeeze(t)
	res, err := f.tr.EvictOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Evicted, []uint64{2}) {
		t.Fatalf("LRU evicted %v, want [2]", res.Evicted)
	}
	f.checkGone(t, 2)
}

func TestEvictPolicySwitchAtRunTime(t *testing.T) {
	f := newFilled(t, Config{})
	f.clk.Advance(time.Minute)
	mustRead(t, f.tr, f.locs["b1-o0"], f.vals["b1-o0"])
	f.tr.SetPolicy(LRU)
	f.squeeze(t)
	res, _ := f.tr.EvictOnce(context.Background())
	if !slices.Equal(res.Evicted, []uint64{2}) {
		t.Fatalf("after switch to LRU evicted %v, want [2]", res.Evicted)
	}
	f.tr.SetPolicy(FIFO)
	f.squeeze(t)
	res, _ = f.tr.EvictOnce(context.Background())
	if !slices.Equal(res.Evicted, []uint64{1}) || f.tr.Stats().Policy != FIFO {
		t.Fatalf("after switch back to FIFO evicted %v, want [1]", res.Evicted)
	}
}

func TestEvictRefusedByMasterKeepsEverything(t *testing.T) {
	f := newFilled(t, Config{})
	f.squeeze(t)
	before := f.tr.Objects()
	// Unreachable: the pass stops at the first bucket.
	f.m.setRefuse(kverr.New(kverr.RPCFail, "", "master unreachable"))
	res, err := f.tr.EvictOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Evicted) != 0 || !slices.Equal(res.Refused, []uint64{1}) || !kverr.Is(res.Errors[0], kverr.RPCFail) {
		t.Fatalf("unreachable pass: %+v", res)
	}
	// Refusing: every candidate is asked, none deleted.
	f.m.setRefuse(errors.New("replicas in flight"))
	res, err = f.tr.EvictOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Evicted) != 0 || !slices.Equal(res.Refused, []uint64{1, 2, 3}) || len(res.Errors) != 3 {
		t.Fatalf("refused pass: %+v", res)
	}
	for id := uint64(1); id <= 4; id++ {
		data, meta := bucketFiles(f.dir, id)
		if !fileExists(data) || !fileExists(meta) {
			t.Fatalf("bucket %d files deleted although the master refused", id)
		}
	}
	if after := f.tr.Objects(); !slices.Equal(before, after) {
		t.Fatalf("index changed: %d -> %d objects", len(before), len(after))
	}
	for key, loc := range f.locs {
		mustRead(t, f.tr, loc, f.vals[key])
	}
	if s := f.tr.Stats(); s.EvictRefused != 4 || s.EvictedBuckets != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Retried on the next pass once the master agrees.
	f.m.setRefuse(nil)
	res, _ = f.tr.EvictOnce(context.Background())
	if !slices.Equal(res.Evicted, []uint64{1}) {
		t.Fatalf("retry evicted %v", res.Evicted)
	}
	f.checkGone(t, 1)
}

func TestPutEvictsWhenFull(t *testing.T) {
	f := newFilled(t, Config{})
	used := f.tr.Stats().Used
	f.tr.SetCapacity(used + 100) // below the high watermark? no: the next Put would pass capacity
	v := value(99, 3*Block)
	loc := mustPut(t, f.tr, "new", v)
	mustRead(t, f.tr, loc, v)
	if d := f.m.drops(); len(d) == 0 || d[0] != 1 {
		t.Fatalf("Put evicted %v, want oldest bucket 1 first", d)
	}
	f.checkGone(t, 1)
}

func TestPutLargerThanCapacityEvictsNothing(t *testing.T) {
	f := newFilled(t, Config{})
	f.tr.SetCapacity(64 * Block)
	v := value(5, 64*Block)
	_, err := f.tr.Put(context.Background(), "t", "huge", v, Checksum(v))
	wantCode(t, err, kverr.PayloadTooLarge)
	if d := f.m.drops(); len(d) != 0 {
		t.Fatalf("a Put that can never fit evicted %v", d)
	}
}

func TestPutNoAvailableHandleWhenEvictionRefused(t *testing.T) {
	f := newFilled(t, Config{})
	f.m.setRefuse(errors.New("object in flight"))
	f.tr.SetCapacity(f.tr.Stats().Used + 100)
	v := value(99, 3*Block)
	_, err := f.tr.Put(context.Background(), "t", "new", v, Checksum(v))
	wantCode(t, err, kverr.NoAvailableHandle)
	if _, ok := f.tr.Lookup("t", "new"); ok {
		t.Fatal("refused Put is indexed")
	}
	if s := f.tr.Stats(); s.NoSpace != 1 || s.Objects != 13 || s.EvictedBuckets != 0 {
		t.Fatalf("stats %+v", s)
	}
	for key, loc := range f.locs {
		mustRead(t, f.tr, loc, f.vals[key])
	}
}

func TestOnlyBucketIsEvictedWhenOpen(t *testing.T) {
	m := newFakeMaster()
	tr := openTier(t, Config{Capacity: 8 * Block, Notifier: m})
	a := mustPut(t, tr, "a", value(1, 3*Block))
	b := mustPut(t, tr, "b", value(2, 3*Block))
	if a.Bucket != b.Bucket {
		t.Fatal("expected one bucket")
	}
	c := mustPut(t, tr, "c", value(3, 3*Block)) // passes capacity: the open bucket is the only one
	if c.Bucket == a.Bucket || !slices.Equal(m.drops(), []uint64{a.Bucket}) {
		t.Fatalf("c at %+v, drops %v", c, m.drops())
	}
	if _, ok := tr.Lookup("t", "a"); ok {
		t.Fatal("a survived eviction of its bucket")
	}
}

func TestReaderDelaysDeletionAndGetsCorrectBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		drain   time.Duration
		timeout bool
	}{{"drained", time.Hour, false}, {"drain timeout", 10 * time.Millisecond, true}} {
		t.Run(tc.name, func(t *testing.T) {
			fi := NewFaultInjector(OSFS{})
			f := newFilled(t, Config{FS: fi, ReadDrainTimeout: tc.drain})
			waiting := make(chan uint64, 1)
			f.tr.onDrainWait = func(id uint64) { waiting <- id }
			gate := fi.HoldReads(dataName(1))
			defer gate.Release()
			loc, want := f.locs["b1-o1"], f.vals["b1-o1"]
			got := make([]byte, loc.Length)
			readDone := make(chan error, 1)
			go func() { readDone <- f.tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, got) }()
			<-gate.Entered() // the reader is in the middle of its read

			f.squeeze(t)
			evictDone := make(chan EvictResult, 1)
			go func() {
				res, _ := f.tr.EvictOnce(context.Background())
				evictDone <- res
			}()
			var res EvictResult
			if tc.timeout {
				res = <-evictDone // deleted while the read is still held
				data, _ := bucketFiles(f.dir, 1)
				if fileExists(data) {
					t.Fatal("data file kept after drain timeout")
				}
				gate.Release()
			} else {
				// The reader is held, so the eviction must stop and wait.
				select {
				case id := <-waiting:
					if id != 1 {
						t.Fatalf("waiting for readers of bucket %d", id)
					}
				case res = <-evictDone:
					t.Fatalf("eviction finished while a read was in flight: %+v", res)
				}
				data, meta := bucketFiles(f.dir, 1)
				if !fileExists(data) || !fileExists(meta) {
					t.Fatal("bucket files deleted while a read was in flight")
				}
				if _, ok := f.tr.Lookup("t", "b1-o1"); ok {
					t.Fatal("object still indexed after the master agreed to drop its bucket")
				}
				gate.Release()
				res = <-evictDone
			}
			if err := <-readDone; err != nil {
				t.Fatalf("in-flight read failed: %v", err)
			}
			if string(got) != string(want) {
				t.Fatal("in-flight read returned wrong bytes")
			}
			if !slices.Equal(res.Evicted, []uint64{1}) || (res.DrainTimeouts == 1) != tc.timeout {
				t.Fatalf("eviction result %+v", res)
			}
			f.checkGone(t, 1)
		})
	}
}

func TestRunEvictsInBackground(t *testing.T) {
	f := newFilled(t, Config{EvictInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.tr.Run(ctx); close(done) }()
	f.squeeze(t) // SetCapacity wakes Run
	if id := <-f.m.calls; id != 1 {
		t.Fatalf("Run asked to drop bucket %d first", id)
	}
	for f.tr.Stats().EvictedBuckets == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	f.checkGone(t, 1)
}

func TestSetHighWatermark(t *testing.T) {
	tr := openTier(t, Config{})
	wantCode(t, tr.SetHighWatermark(0.5), kverr.InvalidParams) // below the low watermark
	wantCode(t, tr.SetHighWatermark(1.2), kverr.InvalidParams)
	if err := tr.SetHighWatermark(0.9); err != nil || tr.Stats().HighWatermark != 0.9 {
		t.Fatalf("SetHighWatermark(0.9): %v, %v", err, tr.Stats().HighWatermark)
	}
}

// TestReadsConcurrentWithEviction runs readers, a writer and eviction at
// once (meant for -race): reads either return the right bytes or
// OBJECT_NOT_FOUND for an evicted bucket, never anything else.
func TestReadsConcurrentWithEviction(t *testing.T) {
	m := newFakeMaster()
	tr := openTier(t, Config{BucketSize: 8 * Block, Capacity: 96 * Block, Notifier: m, ReadDrainTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tr.Run(ctx)

	type obj struct {
		loc Location
		v   []byte
	}
	var mu sync.Mutex
	var objs []obj
	var bad atomic.Value
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				if len(objs) == 0 {
					mu.Unlock()
					continue
				}
				o := objs[(i*7+r)%len(objs)]
				mu.Unlock()
				got := make([]byte, len(o.v))
				err := tr.ReadExtent(ctx, o.loc.Bucket, o.loc.Offset, got)
				switch {
				case err == nil && string(got) != string(o.v):
					bad.Store(fmt.Errorf("wrong bytes at %+v", o.loc))
				case err != nil && !kverr.Is(err, kverr.ObjectNotFound):
					bad.Store(err)
				}
			}
		}()
	}
	for i := range 200 {
		v := value(uint64(i), 2*Block+i)
		loc, err := tr.Put(ctx, "t", fmt.Sprint(i), v, Checksum(v))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		objs = append(objs, obj{loc, v})
		mu.Unlock()
		if i%25 == 0 {
			if _, err := tr.EvictOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if err, _ := bad.Load().(error); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.EvictedBuckets == 0 || s.Used > s.Capacity {
		t.Fatalf("stats %+v", s)
	}
}
