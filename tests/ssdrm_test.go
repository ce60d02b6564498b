package tests

import (
	"bytes"
	"context"
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// TestRemovedSSDObjectNeverComesBack: an object whose only copy is on an
// appliance's SSD tier, read once by a client that caches its read lease,
// does not read back after `kvtier rm --force`: the removal returns once
// the appliance made it durable, and its SSD tier no longer serves the
// extent (ssd.Tier.ReadExtent finds no object there), though the bytes are
// still on disk. (The DRAM counterpart is in removedshm_test.go.)
func TestRemovedSSDObjectNeverComesBack(t *testing.T) {
	c := startCluster(t, "--offload", "immediate", "--high-watermark", "0.8", "--eviction-ratio", "0.2", "--lease-ttl", "30s")
	c.appliance("ssd-box", "--dram", "32MiB", "--ssd-dir", t.TempDir(), "--ssd-capacity", "1GiB")
	w, r := c.client(t), c.client(t)
	ctx := context.Background()
	vals := putBlocksOnSSD(ctx, t, w, 48) // 48 MiB into 32 MiB of DRAM
	var ssdOnly []string
	for key := range vals {
		info, _ := w.Stat(ctx, key)
		if !hasReplica(info, kvtierpb.ReplicaType_MEMORY) {
			ssdOnly = append(ssdOnly, key)
		}
	}
	if len(ssdOnly) == 0 {
		t.Fatal("48 MiB into 32 MiB of DRAM left every object in DRAM")
	}
	t.Logf("%d of %d objects only on SSD", len(ssdOnly), len(vals))
	for _, key := range ssdOnly {
		if got, err := r.Get(ctx, key); err != nil || !bytes.Equal(got, vals[key]) {
			t.Fatalf("%s: %v", key, err)
		}
	}
	for _, key := range ssdOnly {
		if out, errOut, code := c.cli(t, nil, "rm", "--force", key); code != 0 {
			t.Fatalf("rm %s: %d %s %s", key, code, out, errOut)
		}
	}
	for _, key := range ssdOnly {
		got, err := r.Get(ctx, key)
		if !kverr.Is(err, kverr.ObjectNotFound) {
			t.Errorf("removed %s read back: %d bytes, %v", key, len(got), err)
		}
	}
}
