package appliance_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/master"
	"github.com/kvtier/kvtier/ssd"
)

// putOnDisk stores keys directly in the SSD tier of dir (the appliance
// using it is stopped): copies it made and, for "unknown", one the master
// never heard of (an offload written after the master forgot its task).
func putOnDisk(t *testing.T, dir string, keys ...string) {
	t.Helper()
	tier, err := ssd.Open(context.Background(), ssd.Config{Dir: dir, Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := tier.Put(context.Background(), "", k, []byte("bytes of "+k), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
}

func diskKeys(t *testing.T, dir string) []string {
	t.Helper()
	tier, err := ssd.Open(context.Background(), ssd.Config{Dir: dir, Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	var out []string
	for _, e := range tier.Objects() {
		out = append(out, e.Key)
	}
	sort.Strings(out)
	return out
}

// TestRestartDropsCopiesTheMasterRefuses: a box restarted on its SSD
// directory re-registers what it holds and ends its registration; the
// master keeps the copies it knew, refuses one whose key was removed while
// the box was down and one it never acknowledged, and the box removes
// those from its SSD, so that no later registration (a master restart's)
// can bring them back.
func TestRestartDropsCopiesTheMasterRefuses(t *testing.T) {
	ctx := context.Background()
	addr, mc := startMasterCfg(t, master.Config{OffloadMode: master.OffloadOff, RemoveSyncTimeout: 50 * time.Millisecond})
	dir := t.TempDir()
	putOnDisk(t, dir, "kept", "removed")
	cfg := appliance.Config{Name: "box", MasterAddr: addr, DRAM: 8 << 20, SSDDir: dir, SSDCapacity: 64 << 20}
	a, err := appliance.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kept", "removed"} {
		if _, err := mc.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "reader", Key: []byte(k)}); err != nil {
			t.Fatalf("%s not registered at the first start: %v", k, err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// While the box is down: "removed" is removed (the removal waits for
	// the box), and a copy the master never acknowledged lands on its SSD.
	_, _ = mc.Remove(ctx, &kvtierpb.KeyRequest{Key: []byte("removed"), Force: true})
	putOnDisk(t, dir, "unknown")

	a, err = appliance.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mc.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "reader", Key: []byte("kept")}); err != nil {
		t.Fatalf("kept copy not served after the restart: %v", err)
	}
	for _, k := range []string{"removed", "unknown"} {
		if _, err := mc.GetObject(ctx, &kvtierpb.KeyRequest{Key: []byte(k)}); err == nil {
			t.Fatalf("%s came back with the restart", k)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, okR := a.Tier().Lookup("", "removed")
		_, okU := a.Tier().Lookup("", "unknown")
		if !okR && !okU {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the box still holds copies the master refused: removed %v, unknown %v", okR, okU)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := diskKeys(t, dir); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("the SSD holds %v after the restart, want [kept]", got)
	}
}
