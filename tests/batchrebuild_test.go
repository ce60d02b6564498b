package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/appliance"
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok, why := m2.Rebuilding(); ok {
			t.Logf("restarted master: %s", why)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted master never waited for the box's report")
		}
		time.Sleep(time.Millisecond)
	}
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

// batchOf is n keys under prefix with random values of size bytes.
func batchOf(prefix string, n, size int) ([]string, [][]byte) {
	keys, vals := make([]string, n), make([][]byte, n)
	for i := range n {
		keys[i], vals[i] = fmt.Sprintf("%s/%03d", prefix, i), randomBytes(uint64(i+size), size)
	}
	return keys, vals
}
