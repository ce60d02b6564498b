package client_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/master"
)

// TestPutGetOverEveryTransport runs the SDK's put and get paths (single and
// batch, small and multi-slice objects, checksums verified by Get, and the
// stored checksum right whether the put sent it with PutStart or, a large
// value over sockets, with PutEnd) between
// a storage node and a reader over every transport the engine has: the
// local copy (the reader is the node), TCP, the in-memory network, RDMA
// over a fake fabric, and RDMA through real verbs where this build and host
// have them (else it skips with the engine's own reason). The replica descriptors come from a real master; each case
// checks the reader's engine counted the requests on that transport.
func TestPutGetOverEveryTransport(t *testing.T) {
	type setup func(t *testing.T, addr string) (reader *client.Client)
	node := func(t *testing.T, addr string, tc client.TransferConfig) *client.Client {
		return newClient(t, client.Config{MasterAddr: addr, GlobalSegmentSize: 16 << 20, Hugepages: dram.HugepageOff, Transfer: tc})
	}
	cases := []struct {
		name  string
		via   func(transfer.Stats) uint64
		setup setup
	}{
		{"local", func(s transfer.Stats) uint64 { return s.LocalRequests }, func(t *testing.T, addr string) *client.Client {
			return node(t, addr, client.TransferConfig{})
		}},
		{"tcp", func(s transfer.Stats) uint64 { return s.TCPRequests }, func(t *testing.T, addr string) *client.Client {
			node(t, addr, client.TransferConfig{})
			return newClient(t, client.Config{MasterAddr: addr, Transfer: client.TransferConfig{DisableSharedMemory: true, RDMADevice: "off"}})
		}},
		{"mem", func(s transfer.Stats) uint64 { return s.MemRequests }, func(t *testing.T, addr string) *client.Client {
			n := transfer.NewMemNet()
			node(t, addr, client.TransferConfig{MemNet: n})
			return newClient(t, client.Config{MasterAddr: addr, Transfer: client.TransferConfig{MemNet: n}})
		}},
		// The RDMA transport over transfer's FAKE fabric (this machine has no
		// device): the node announces its segments' offers at mount, the
		// master copies them into the replicas, the reader routes by them.
		{"rdma-fake", func(s transfer.Stats) uint64 { return s.RDMARequests }, func(t *testing.T, addr string) *client.Client {
			f := transfer.NewFakeRDMA()
			node(t, addr, client.TransferConfig{FakeRDMA: f, DisableSharedMemory: true})
			return newClient(t, client.Config{MasterAddr: addr, Transfer: client.TransferConfig{FakeRDMA: f, DisableSharedMemory: true}})
		}},
		{"rdma", func(s transfer.Stats) uint64 { return s.RDMARequests }, func(t *testing.T, addr string) *client.Client {
			r := newClient(t, client.Config{MasterAddr: addr, Transfer: client.TransferConfig{RDMADevice: "auto", DisableSharedMemory: true}})
			if on, why := r.Engine().RDMAStatus(); !on {
				t.Skipf("RDMA not available to this test: %s", why)
			}
			node(t, addr, client.TransferConfig{RDMADevice: "auto", DisableSharedMemory: true})
			return r
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Trusted: the master withholds RDMA offers from replicas while
			// grants are enforced (master.Config.RDMATrustedFabric).
			addr, _ := startMaster(t, master.Config{RDMATrustedFabric: true})
			r := tc.setup(t, addr)
			ctx := context.Background()
			before := tc.via(r.Engine().Stats())
			late := client.LateSum(r, ctx, client.LateSumMin)
			if want := tc.name == "tcp" || tc.name == "rdma-fake"; late != want {
				t.Fatalf("a %d-byte put sends its checksum with PutEnd: %v, want %v", client.LateSumMin, late, want)
			}
			for i, n := range []int{1, 4096, 3<<20 + 5, client.LateSumMin + 5} {
				key := fmt.Sprintf("%s-%d", tc.name, i)
				val := bytes.Repeat([]byte{byte(i + 1), 7, 9}, n/3+1)[:n]
				if err := r.Put(ctx, key, val); err != nil {
					t.Fatalf("put %d bytes: %v", n, err)
				}
				info, err := r.Stat(ctx, key)
				if err != nil || !info.GetHasChecksum() || info.GetCrc32C() != client.Checksum(val) {
					t.Fatalf("put %d bytes: stored checksum %v %08x, want %08x (%v)", n, info.GetHasChecksum(), info.GetCrc32C(), client.Checksum(val), err)
				}
				got, err := r.Get(ctx, key)
				if err != nil || !bytes.Equal(got, val) {
					t.Fatalf("get %d bytes: %v (equal %v)", n, err, bytes.Equal(got, val))
				}
			}
			keys := make([]string, 32)
			vals := make([][]byte, 32)
			for i := range keys {
				keys[i], vals[i] = fmt.Sprintf("%s-b%d", tc.name, i), bytes.Repeat([]byte{byte(i)}, 4096+i)
			}
			for i, err := range r.BatchPut(ctx, keys, vals) {
				if err != nil {
					t.Fatalf("batch put %d: %v", i, err)
				}
			}
			got, errs := r.BatchGet(ctx, keys)
			for i := range keys {
				if errs[i] != nil || !bytes.Equal(got[i], vals[i]) {
					t.Fatalf("batch get %d: %v", i, errs[i])
				}
			}
			if n := tc.via(r.Engine().Stats()) - before; n < 3*2+32*2 {
				t.Fatalf("%s carried %d requests, want >= %d: %+v", tc.name, n, 3*2+32*2, r.Engine().Stats())
			}
		})
	}
}
