package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// TestBatchPutWhileMasterRebuilds: a master restarted on the same address
// refuses puts with UNAVAILABLE_IN_CURRENT_STATUS until the appliances
// have reported their DRAM directories. A BatchPut in that window waits
// it out as a single Put does (client rebuildRetry) instead of failing
// every key.
func TestBatchPutWhileMasterRebuilds(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	m1, stop1 := runMaster(t, master.Config{}, lis)
	t.Cleanup(stop1)
	ip := &inproc{m: m1, addr: addr}
	ip.appliance(t, appliance.Config{Name: "rb-box"})
	cl := ip.client(t)
	ctx := context.Background()
	keys, vals := batchOf("before", 32, 4<<10)
	for i, err := range cl.BatchPut(ctx, keys, vals) {
		if err != nil {
			t.Fatalf("%s: %v", keys[i], err)
		}
	}
	stop1()

	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m2, stop2 := runMaster(t, master.Config{}, lis2)
	t.Cleanup(stop2)
	awaitRebuilding(t, m2)
	t0 := time.Now()
	keys, vals = batchOf("after", 32, 4<<10)
	errs := cl.BatchPut(ctx, keys, vals)
	t.Logf("batch put took %v", time.Since(t0))
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", keys[i], err)
		}
	}
	if t.Failed() {
		return
	}
	before, bvals := batchOf("before", 32, 4<<10)
	for i, k := range append(keys, before...) {
		want := append(vals, bvals...)[i]
		if got, err := getRetrying(ctx, cl, k, 10*time.Second); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v (want %d)", k, len(got), err, len(want))
		}
	}
}

// TestRemoveWhileMasterRebuilds: a removal that reaches a restarted
// master before the appliance has reported the key's DRAM copy must not
// answer OBJECT_NOT_FOUND and let the report bring the object back: the
// master answers UNAVAILABLE_IN_CURRENT_STATUS (retry) for a key it does
// not know while it rebuilds, the SDK asks again, and the object is
// removed for good. Single removes, batch removes and bulk removes alike.
func TestRemoveWhileMasterRebuilds(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	m1, stop1 := runMaster(t, master.Config{}, lis)
	t.Cleanup(stop1)
	ip := &inproc{m: m1, addr: addr}
	ip.appliance(t, appliance.Config{Name: "rm-box"})
	cl := ip.client(t)
	ctx := context.Background()
	keys, vals := batchOf("rm", 8, 4<<10)
	for i, err := range cl.BatchPut(ctx, keys, vals) {
		if err != nil {
			t.Fatalf("%s: %v", keys[i], err)
		}
	}
	stop1()

	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m2, stop2 := runMaster(t, master.Config{}, lis2)
	t.Cleanup(stop2)
	awaitRebuilding(t, m2)
	if err := cl.Remove(ctx, keys[0], true); err != nil {
		t.Errorf("remove %s while the master rebuilds: %v", keys[0], err)
	}
	for i, err := range cl.BatchRemove(ctx, keys[1:3], true) {
		if err != nil {
			t.Errorf("batch remove %s while the master rebuilds: %v", keys[1+i], err)
		}
	}
	if n, err := cl.RemoveByRegex(ctx, "^rm/00[34]$", true); err != nil || n != 2 {
		t.Errorf("remove by regex while the master rebuilds: %d removed, %v (want 2)", n, err)
	}
	for i, k := range keys {
		got, err := getRetrying(ctx, cl, k, 10*time.Second)
		switch {
		case i < 5 && !kverr.Is(err, kverr.ObjectNotFound):
			t.Errorf("%s came back after its removal: %d bytes, %v", k, len(got), err)
		case i >= 5 && (err != nil || !bytes.Equal(got, vals[i])):
			t.Errorf("%s (kept): %d bytes, %v", k, len(got), err)
		}
	}
}

// awaitRebuilding waits until m waits for an appliance's report.
func awaitRebuilding(t *testing.T, m *master.Master) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok, why := m.Rebuilding(); ok {
			t.Logf("restarted master: %s", why)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted master never waited for the box's report")
		}
		time.Sleep(time.Millisecond)
	}
}

// batchOf is n keys under prefix with random values of size bytes.
func batchOf(prefix string, n, size int) ([]string, [][]byte) {
	keys, vals := make([]string, n), make([][]byte, n)
	for i := range n {
		keys[i], vals[i] = fmt.Sprintf("%s/%03d", prefix, i), randomBytes(uint64(i+size), size)
	}
	return keys, vals
}
