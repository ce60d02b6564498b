package tests

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/master"
)

// TestRemovedObjectNeverComesBackOverRDMA: a reader holding cached read
// leases (client.Config.LeaseCacheKeys) reads a box's objects with
// one-sided RDMA READs, which pass no data port. After another client
// removes half of them (forced: they are leased), every removed key reads
// OBJECT_NOT_FOUND at once: the READ is checked against the box's free
// table, read over RDMA after the data, and goes over TCP (refused there,
// then to the master); the kept half stays on RDMA. Both configurations
// that hand out RDMA offers: a trusted fabric (signed grants) and the open
// one (--data-grants=false: unsigned grants). RDMA here is transfer's
// FAKE fabric (this machine has no device); the offers, grants, records
// and revocations are the real ones.
func TestRemovedObjectNeverComesBackOverRDMA(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  master.Config
	}{{"trusted-fabric", master.Config{RDMATrustedFabric: true}}, {"open", master.Config{DisableGrants: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			ip := startInproc(t, tc.cfg)
			f := transfer.NewFakeRDMA()
			a := ip.appliance(t, appliance.Config{Name: "box", Transfer: transfer.Config{FakeRDMA: f, DisableSharedMemory: true}})
			ctx := context.Background()
			newReader := func() *client.Client {
				c, err := client.New(ctx, client.Config{MasterAddr: ip.addr, HeartbeatInterval: 100 * time.Millisecond,
					Transfer: transfer.Config{FakeRDMA: f, DisableSharedMemory: true}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			reader, remover := newReader(), ip.tcpClient(t)
			const n = 40
			val := func(i int) []byte { return bytes.Repeat([]byte{byte(i), 0x5a, byte(i >> 8)}, 1366+i*301) }
			for i := range n {
				if err := remover.Put(ctx, fmt.Sprintf("gone/%d", i), val(i)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range n {
				if got, err := reader.Get(ctx, fmt.Sprintf("gone/%d", i)); err != nil || !bytes.Equal(got, val(i)) {
					t.Fatalf("gone/%d: %v", i, err)
				}
			}
			if st := reader.Engine().Stats(); st.RDMARequests < n || st.TCPRequests != 0 {
				t.Fatalf("the reader's first reads: %d over RDMA, %d over TCP; want all %d over RDMA", st.RDMARequests, st.TCPRequests, n)
			}
			removeEvenKeys(t, remover, a, n)
			before := reader.Engine().Stats()
			readsAfterRemoval(t, "rdma", reader, n, val)
			after := reader.Engine().Stats()
			if got := after.RDMARequests - before.RDMARequests; got != n/2 {
				t.Errorf("%d RDMA requests for %d kept objects", got, n/2)
			}
			// The cached read, then the speculative read of the remembered
			// replica beside the master's query (Config.ReplicaHints).
			if got := after.RDMANotAdmitted - before.RDMANotAdmitted; got < n/2 || got > n {
				t.Errorf("%d RDMA reads not admitted, want one or two for each of the %d removed", got, n/2)
			}
			// A put into the freed space, read back right over RDMA.
			for i := 0; i < n; i += 2 {
				key, v := fmt.Sprintf("new/%d", i), bytes.Repeat([]byte{0xc3, byte(i)}, 2000+i*151)
				if err := remover.Put(ctx, key, v); err != nil {
					t.Fatal(err)
				}
				if got, err := reader.Get(ctx, key); err != nil || !bytes.Equal(got, v) {
					t.Fatalf("%s: %v", key, err)
				}
			}
		})
	}
}
