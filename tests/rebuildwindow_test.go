package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// TestBatchPutWhileMasterRebuilds: a master restarted on the same address
// refuses puts with UNAVAILABLE_IN_CURRENT_STATUS until the appliances
// have reported their DRAM directories. A BatchPut in that window waits
// it out as a single Put does (client rebuildRetry) instead of failing
// every key.
func TestBatchPutWhileMasterRebuilds(t *testing.T) {
	cl, before, bvals := restartWithObjects(t, "rb-box", "before", 32)
	ctx := context.Background()
	t0 := time.Now()
	keys, vals := batchOf("after", 32, 4<<10)
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
// master waits for the report (master Remove, "settling") and removes the
// object for good. Single removes, batch removes and bulk removes alike.
func TestRemoveWhileMasterRebuilds(t *testing.T) {
	cl, keys, vals := restartWithObjects(t, "rm-box", "rm", 8)
	ctx := context.Background()
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

// restartWithObjects runs a master and an appliance named box in this
// process, puts n keys under prefix through a client, then replaces the
// master with a new one on the same address and returns once it waits
// for the box's report: the client, and the keys and values put.
func restartWithObjects(t *testing.T, box, prefix string, n int) (*client.Client, []string, [][]byte) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	m1, stop1 := runMaster(t, master.Config{}, lis)
	t.Cleanup(stop1)
	ip := &inproc{m: m1, addr: addr}
	ip.appliance(t, appliance.Config{Name: box})
	cl := ip.client(t)
	keys, vals := batchOf(prefix, n, 4<<10)
	for i, err := range cl.BatchPut(context.Background(), keys, vals) {
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
	return cl, keys, vals
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
