package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// TestPutOptionsRefused: a negative replica count or soft-pin TTL is
// INVALID_PARAMS naming the key, for Put and BatchPut, and stores nothing
// (they used to be clamped to the default, or wrapped into a huge TTL).
func TestPutOptionsRefused(t *testing.T) {
	addr, _ := startMaster(t, master.Config{})
	ctx := context.Background()
	c := newClient(t, client.Config{MasterAddr: addr, GlobalSegmentSize: 8 << 20, Hugepages: dram.HugepageOff})
	val := []byte("value")
	for _, tc := range []struct {
		name string
		opt  client.PutOptions
	}{
		{"replicas", client.PutOptions{Replicas: -1}},
		{"nof-replicas", client.PutOptions{NOFReplicas: -2}},
		{"soft-pin-ttl", client.PutOptions{SoftPin: true, SoftPinTTL: -time.Second}},
	} {
		err := c.Put(ctx, "k-"+tc.name, val, client.WithOptions(tc.opt))
		if !kverr.Is(err, kverr.InvalidParams) {
			t.Fatalf("%s: Put %v, want INVALID_PARAMS", tc.name, err)
		}
		if errs := c.BatchPut(ctx, []string{"b1-" + tc.name, "b2-" + tc.name}, [][]byte{val, val}, client.WithOptions(tc.opt)); !kverr.Is(errs[0], kverr.InvalidParams) || !kverr.Is(errs[1], kverr.InvalidParams) {
			t.Fatalf("%s: BatchPut %v, want INVALID_PARAMS for both", tc.name, errs)
		}
		for _, k := range []string{"k-" + tc.name, "b1-" + tc.name, "b2-" + tc.name} {
			if ok, err := c.Exist(ctx, k); ok || err != nil {
				t.Fatalf("%s: %s stored (%v, %v) by a refused put", tc.name, k, ok, err)
			}
		}
	}
	// The zero value still means one replica.
	if err := c.Put(ctx, "ok", val, client.WithReplicas(0)); err != nil {
		t.Fatal(err)
	}
}
