package tests

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// TestRemovedObjectNeverComesBackOverSharedMemory: a client holding a
// cached read lease (Config.LeaseCacheKeys) that reads over shared memory
// does not get an object back once another client force-removed it and
// the box applied the free, as over TCP (where the box refuses the revoked
// grant). Its other cached objects still read over shared memory.
func TestRemovedObjectNeverComesBackOverSharedMemory(t *testing.T) {
	ip := startInproc(t, master.Config{})
	a := ip.appliance(t, appliance.Config{Name: "box"})
	ctx := context.Background()
	shm, tcp, remover := ip.client(t), ip.tcpClient(t), ip.tcpClient(t)
	const n = 40
	// At least 4 KiB each: no two extents start in one granule of the
	// box's free tables (smaller objects share a slot; see the end).
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i), 0xa5, byte(i >> 8)}, 1366+i*301) }
	for i := range n {
		if err := remover.Put(ctx, fmt.Sprintf("gone/%d", i), val(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Both readers cache every key's lease; the shared-memory reader maps
	// the box's segments first, so its reads below go through them.
	deadline := time.Now().Add(10 * time.Second)
	for shm.Engine().SharedPending() || shm.Engine().Stats().SharedRequests == 0 {
		if _, err := shm.Get(ctx, "gone/0"); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the box's shared memory never mapped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []*client.Client{shm, tcp} {
		for i := range n {
			if got, err := c.Get(ctx, fmt.Sprintf("gone/%d", i)); err != nil || !bytes.Equal(got, val(i)) {
				t.Fatalf("gone/%d: %v", i, err)
			}
		}
	}
	removeEvenKeys(t, remover, a, n)
	before := shm.Engine().Stats()
	readsAfterRemoval(t, "shared memory", shm, n, val)
	readsAfterRemoval(t, "tcp", tcp, n, val)
	after := shm.Engine().Stats()
	// The kept half still read over shared memory; the removed half went
	// to TCP (refused there: revoked), then to the master.
	if got := after.SharedRequests - before.SharedRequests; got != n/2 {
		t.Errorf("%d shared-memory requests for %d kept objects", got, n/2)
	}
	// (The cached read, then the speculative read of the remembered
	// replica beside the master's query: Config.ReplicaHints.)
	if got := after.SharedNotAdmitted - before.SharedNotAdmitted; got < n/2 || got > n {
		t.Errorf("%d shared-memory reads not admitted, want one or two for each of the %d removed", got, n/2)
	}

	// Objects under 4 KiB share a slot of the table: the removal of one
	// sends its neighbours' cached reads over TCP, which serves them.
	small := func(i int) []byte { return bytes.Repeat([]byte{byte(i), 0x3c}, 300) }
	for i := range 8 {
		if err := remover.Put(ctx, fmt.Sprintf("small/%d", i), small(i)); err != nil {
			t.Fatal(err)
		}
		if got, err := shm.Get(ctx, fmt.Sprintf("small/%d", i)); err != nil || !bytes.Equal(got, small(i)) {
			t.Fatalf("small/%d: %v", i, err)
		}
	}
	if err := remover.Remove(ctx, "small/3", true); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		got, err := shm.Get(ctx, fmt.Sprintf("small/%d", i))
		switch {
		case i == 3 && !kverr.Is(err, kverr.ObjectNotFound):
			t.Errorf("removed small/3 read back: %d bytes, %v", len(got), err)
		case i != 3 && (err != nil || !bytes.Equal(got, small(i))):
			t.Errorf("small/%d beside a removed one: %v", i, err)
		}
	}
}

// TestRemovedObjectNeverComesBackAcrossProcesses is the same as a user
// meets it: a master and an appliance, each its own process; this
// process's clients read over the appliance's shared memory or over TCP
// and cache their read leases; an operator removes objects with `kvtier rm
// --force`. With grants (the default) and without (--data-grants=false:
// the replicas then carry unsigned grants, only for their revocation).
func TestRemovedObjectNeverComesBackAcrossProcesses(t *testing.T) {
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"grants", nil}, {"open", []string{"--data-grants=false"}}} {
		t.Run(mode.name, func(t *testing.T) {
			c := startCluster(t, append([]string{"--lease-ttl", "30s"}, mode.extra...)...) // the cached leases outlive the test
			c.appliance("box")
			ctx := context.Background()
			shm := c.client(t)
			tcp := c.clientWith(t, client.Config{Transfer: transfer.Config{DisableSharedMemory: true}})
			val := func(i int) []byte { return bytes.Repeat([]byte{byte(i), 0x77}, 4096+i*1000) }
			const n = 6
			for i := range n {
				if err := tcp.Put(ctx, fmt.Sprintf("rm/%d", i), val(i)); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, 10*time.Second, "the box's shared memory mapped", func() bool {
				if _, err := shm.Get(ctx, "rm/0"); err != nil {
					t.Fatal(err)
				}
				return !shm.Engine().SharedPending() && shm.Engine().Stats().SharedRequests > 0
			})
			for _, r := range []*client.Client{shm, tcp} {
				for i := range n {
					if got, err := r.Get(ctx, fmt.Sprintf("rm/%d", i)); err != nil || !bytes.Equal(got, val(i)) {
						t.Fatalf("rm/%d: %v", i, err)
					}
				}
			}
			for i := 0; i < n; i += 2 {
				if out, errOut, code := c.cli(t, nil, "rm", "--force", fmt.Sprintf("rm/%d", i)); code != 0 {
					t.Fatalf("kvtier rm --force rm/%d: exit %d: %s%s", i, code, out, errOut)
				}
			}
			before := shm.Engine().Stats()
			for name, r := range map[string]*client.Client{"shared memory": shm, "tcp": tcp} {
				for i := range n {
					got, err := r.Get(ctx, fmt.Sprintf("rm/%d", i))
					switch {
					case i%2 == 0 && !kverr.Is(err, kverr.ObjectNotFound):
						t.Errorf("%s: removed rm/%d read back: %d bytes, %v; want OBJECT_NOT_FOUND", name, i, len(got), err)
					case i%2 == 1 && (err != nil || !bytes.Equal(got, val(i))):
						t.Errorf("%s: rm/%d: %v", name, i, err)
					}
				}
			}
			after := shm.Engine().Stats()
			if got := after.SharedRequests - before.SharedRequests; got != n/2 {
				t.Errorf("%d shared-memory reads of the %d kept objects", got, n/2)
			}
		})
	}
}

// TestRemovedObjectNeverComesBackThroughRESP: the Redis front end reads
// values in place (client.View) under leases its client caches; a value
// another client removed with `kvtier rm --force` is not served again,
// small (copied into the reply) or large (sent from segment memory).
func TestRemovedObjectNeverComesBackThroughRESP(t *testing.T) {
	p, addr := startRESP(t, "--lease-ttl", "30s")
	rc := dialRESP(t, addr)
	defer rc.Close()
	rm := func(k string) {
		t.Helper()
		if out, errOut, code := runKvtierCode(t, nil, "rm", "--force", k, "--master", p.addrs["grpc"]); code != 0 {
			t.Fatalf("kvtier rm --force %s: exit %d: %s%s", k, code, out, errOut)
		}
	}
	for _, kv := range [][2]string{
		{"small", strings.Repeat("v", 100)},
		{"large", strings.Repeat("0123456789abcdef", 64<<10)}, // 1 MiB
	} {
		k, v := kv[0], kv[1]
		if got := rc.do("SET", k, v); got != "+OK" {
			t.Fatalf("SET %s: %s", k, got)
		}
		for range 2 { // the second read uses the cached lease
			if got := rc.do("GET", k); got != v {
				t.Fatalf("GET %s: %d bytes", k, len(got))
			}
		}
		rm(k)
		// The same value set again, its removed bytes still in place and
		// their lease cached: stored again (the front end skips a SET
		// whose value the key holds; a removed key holds none).
		if got := rc.do("SET", k, v); got != "+OK" {
			t.Fatalf("SET %s again: %s", k, got)
		}
		if got := rc.do("GET", k); got != v {
			t.Fatalf("GET %s set again after its removal: %d bytes", k, len(got))
		}
		if got := rc.do("EXISTS", k); got != ":1" {
			t.Fatalf("EXISTS %s set again after its removal: %s", k, got)
		}
		rm(k)
		if got := rc.do("GET", k); got != "(nil)" {
			t.Fatalf("GET %s after its removal: %d bytes, want (nil)", k, len(got))
		}
	}
}

// removeEvenKeys force-removes gone/0, gone/2 ... of gone/0..n-1 through
// remover (they are leased), and checks box a holds only the rest: a
// removal returns once the box acknowledged the frees, so no wait.
func removeEvenKeys(t *testing.T, remover *client.Client, a *appliance.Appliance, n int) {
	t.Helper()
	for i := 0; i < n; i += 2 {
		if err := remover.Remove(context.Background(), fmt.Sprintf("gone/%d", i), true); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.DramDirectoryLen(); got != n/2 {
		t.Fatalf("box holds %d objects after the removals, want %d", got, n/2)
	}
}

// readsAfterRemoval gets gone/0..n-1 through c after removeEvenKeys: the
// removed ones must be OBJECT_NOT_FOUND, never bytes; the others val(i).
func readsAfterRemoval(t *testing.T, name string, c *client.Client, n int, val func(int) []byte) {
	t.Helper()
	for i := range n {
		got, err := c.Get(context.Background(), fmt.Sprintf("gone/%d", i))
		switch {
		case i%2 == 0 && !kverr.Is(err, kverr.ObjectNotFound):
			t.Errorf("%s: removed gone/%d read back: %d bytes, %v; want OBJECT_NOT_FOUND", name, i, len(got), err)
		case i%2 == 1 && (err != nil || !bytes.Equal(got, val(i))):
			t.Errorf("%s: gone/%d: %v", name, i, err)
		}
	}
}
