package client_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// TestReplicaHints: a repeated Get reads the remembered replica while it
// asks the master and keeps the bytes (a hit), yet every Get still asks the
// master; when another client replaced the object meanwhile, the Get
// returns the new bytes, whatever the speculative read found.
func TestReplicaHints(t *testing.T) {
	addr, lists := startMaster(t, master.Config{})
	ctx := context.Background()
	owner := newClient(t, client.Config{MasterAddr: addr, GlobalSegmentSize: 8 << 20, Hugepages: dram.HugepageOff})
	reader := newClient(t, client.Config{MasterAddr: addr, LeaseCacheKeys: -1}) // every Get asks the master
	v1 := bytes.Repeat([]byte("first!"), 20000)
	if err := owner.Put(ctx, "k", v1); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		got, err := reader.Get(ctx, "k")
		if err != nil || !bytes.Equal(got, v1) {
			t.Fatalf("read %d: %d bytes, %v", i, len(got), err)
		}
	}
	if hits, misses := reader.HintStats(); hits != 3 || misses != 0 {
		t.Fatalf("hits %d misses %d after 4 reads of an unchanged object, want 3 and 0", hits, misses)
	}
	if n := lists.Load(); n != 4 {
		t.Fatalf("%d GetReplicaList calls for 4 reads, want 4: hints never skip the master", n)
	}

	// Replaced by another client: same size, other bytes (likely the same
	// offset), then another size.
	v2 := bytes.Repeat([]byte("second"), 20000)
	v3 := bytes.Repeat([]byte("third."), 30000)
	for _, v := range [][]byte{v2, v3} {
		if err := owner.Remove(ctx, "k", true); err != nil {
			t.Fatal(err)
		}
		if err := owner.Put(ctx, "k", v); err != nil {
			t.Fatal(err)
		}
		got, err := reader.Get(ctx, "k")
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("read after replacement: %d bytes (%q...), %v", len(got), got[:min(len(got), 12)], err)
		}
	}
	hits, misses := reader.HintStats()
	if hits+misses != 5 || misses < 1 {
		t.Fatalf("hits %d misses %d: the size change must be a miss", hits, misses)
	}

	// Removed: the speculative read may succeed, the answer is still
	// OBJECT_NOT_FOUND.
	if err := owner.Remove(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Get(ctx, "k"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("get of a removed object: %v, want OBJECT_NOT_FOUND", err)
	}

	// Off: no speculation.
	off := newClient(t, client.Config{MasterAddr: addr, ReplicaHints: -1})
	if err := owner.Put(ctx, "k", v1); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got, err := off.Get(ctx, "k"); err != nil || !bytes.Equal(got, v1) {
			t.Fatalf("hints off: %v", err)
		}
	}
	if hits, misses := off.HintStats(); hits != 0 || misses != 0 {
		t.Fatalf("hints off: hits %d misses %d", hits, misses)
	}
}
