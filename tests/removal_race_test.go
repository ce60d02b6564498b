package tests

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
	"github.com/kvtier/kvtier/ssd"
)

// TestRemovalsRaceOffloads puts, removes and re-puts (with new bytes) the
// same keys from four goroutines while offloads run, then checks that the
// SSD tier holds nothing the master does not (same bytes), and that a
// restart of the appliance against a fresh master brings back only live
// keys with their last bytes. Run it under -race.
func TestRemovalsRaceOffloads(t *testing.T) {
	dir := t.TempDir()
	ip := startInproc(t, master.Config{})
	a := ip.appliance(t, appliance.Config{Name: "box", SSDDir: dir, SSDCapacity: 1 << 30, SSDBucketSize: 1 << 20})
	c := ip.client(t)
	ctx := context.Background()
	var mu sync.Mutex
	last := map[string][]byte{} // key -> bytes of its live put; nil: removed
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 150 {
				k := fmt.Sprintf("race/%d", (i*7+g)%40) // goroutines share keys
				v := randomBytes(uint64(g*1000+i), 3000+i)
				mu.Lock() // one operation per key at a time keeps the model exact
				switch i % 3 {
				case 0, 1:
					err := c.Put(ctx, k, v)
					if err == nil {
						if last[k] == nil {
							last[k] = v
						} // else "already stored": the first bytes stay
					} else if !kverr.Is(err, kverr.ObjectAlreadyExists) {
						t.Error(err)
					}
				case 2:
					err := c.Remove(ctx, k, true)
					if err == nil {
						last[k] = nil
					} else if !kverr.Is(err, kverr.ObjectNotFound) && !kverr.Is(err, kverr.ReplicaIsNotReady) {
						t.Error(err)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Quiesce: every offload landed or failed.
	time.Sleep(500 * time.Millisecond)
	for k, v := range last {
		if v == nil {
			if ok, _ := c.Exist(ctx, k); ok {
				t.Fatalf("removed %s exists", k)
			}
			continue
		}
		if b, err := c.Get(ctx, k); err != nil || !bytes.Equal(b, v) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
	for _, e := range a.Tier().Objects() {
		v := last[e.Key]
		if v == nil || ssd.Checksum(v) != e.CRC32C {
			t.Fatalf("SSD holds %s (crc %08x) that the master does not hold with those bytes", e.Key, e.CRC32C)
		}
	}
	a.Close(ctx)

	ip2 := startInproc(t, master.Config{})
	ip2.appliance(t, appliance.Config{Name: "box", SSDDir: dir, SSDCapacity: 1 << 30, SSDBucketSize: 1 << 20})
	c2 := ip2.client(t)
	objs, _, err := c2.List(ctx, "race/", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		k := string(o.Key)
		if last[k] == nil {
			t.Fatalf("removed %s came back after the restart", k)
		}
		if b, err := c2.Get(ctx, k); err != nil || !bytes.Equal(b, last[k]) {
			t.Fatalf("get %s after restart: %v", k, err)
		}
	}
	t.Logf("%d keys listed after the restart", len(objs))
}
