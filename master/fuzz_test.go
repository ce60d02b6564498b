package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// FuzzMasterOps drives random operation sequences against a master on a
// fake clock. After every step it checks CheckInvariants (allocated bytes =
// live replica lengths, no overlap, nothing on unmounted segments, counts)
// and, against a small model: a key is never readable before its PutEnd,
// and a leased object is never removed (by Remove, RemoveByRegex or
// eviction) without force.
func FuzzMasterOps(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 3, 1, 5, 1})
	f.Add([]byte{0, 0, 3, 0, 1, 0, 3, 0, 5, 0, 6, 1, 5, 0, 8, 0})
	f.Add([]byte{9, 0, 0, 3, 1, 3, 10, 2, 6, 3, 7, 0, 3, 3, 12, 1, 13, 0})
	f.Add([]byte{0, 1, 0, 4, 1, 1, 14, 5, 3, 5, 6, 2, 7, 0, 8, 0, 11, 1, 3, 1})
	f.Add([]byte{0, 7, 1, 7, 3, 7, 6, 0, 8, 0, 0, 8, 6, 2, 7, 0, 0, 8, 9, 3, 7, 0})
	f.Add([]byte{0, 2, 1, 2, 15, 2, 6, 0, 15, 20, 8, 0, 5, 2, 6, 1, 8, 0})
	f.Add([]byte{0, 0, 1, 0, 0, 1, 1, 1, 0, 2, 1, 2, 10, 20, 10, 26, 5, 0}) // batch offload reports
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			data = data[:400]
		}
		m, fc := newTest(t, Config{OffloadQueueLimit: 3, ClientTTL: 10 * time.Second, ClientGrace: 20 * time.Second, RemoveSyncTimeout: -1})
		segs := []struct {
			client, name string
			size         uint64
		}{{"A", "A/0", 1024}, {"A", "A/1", 512}, {"B", "B/0", 1024}}
		for _, s := range segs {
			mountMem(t, m, s.client, s.name, s.size)
		}
		m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Disk: &DiskStats{Capacity: 1 << 20}})
		clients := []string{"A", "B", "C"}
		ended := map[string]bool{}       // model: the current put of key has ended
		leaseUntil := map[string]int64{} // model: read lease deadline of key
		keyOf := func(b byte) string { return fmt.Sprintf("k%d", b%6) }
		now := func() int64 { return fc.Now().UnixNano() }
		leased := func() []string {
			var out []string
			for k, u := range leaseUntil {
				if _, err := m.GetObject(ctx, "", k); err == nil && u > now() {
					out = append(out, k)
				}
			}
			return out
		}
		stillThere := func(op string, keys []string) {
			for _, k := range keys {
				if _, err := m.GetObject(ctx, "", k); err != nil {
					t.Fatalf("%s removed leased key %s: %v", op, k, err)
				}
			}
		}
		for i := 0; i+1 < len(data); i += 2 {
			op, arg := data[i]%16, data[i+1]
			key, cl := keyOf(arg), clients[int(arg/6)%3]
			switch op {
			case 0:
				_, err := m.PutStart(ctx, PutRequest{Client: cl, Key: key, Size: uint64(arg)*3 + 1, Config: PutConfig{Replicas: 1 + int(arg%3)}})
				if err == nil {
					ended[key] = false
					delete(leaseUntil, key)
				}
			case 1:
				if err := m.PutEnd(ctx, cl, "", key); err == nil {
					ended[key] = true
				}
			case 2:
				m.PutRevoke(ctx, cl, "", key)
			case 3:
				l, err := m.GetReplicaList(ctx, cl, "", key)
				if err == nil {
					if !ended[key] {
						t.Fatalf("step %d: %s readable before PutEnd", i, key)
					}
					leaseUntil[key] = l.LeaseDeadline.UnixNano()
				}
			case 4:
				ok, _ := m.Exist(ctx, "", key)
				if ok && !ended[key] {
					t.Fatalf("step %d: %s exists before PutEnd", i, key)
				}
			case 5:
				force := arg&1 == 1
				u, was := leaseUntil[key]
				if _, err := m.GetObject(ctx, "", key); err != nil {
					was = false
				}
				err := m.Remove(ctx, "", key, force)
				if err == nil && !force && was && u > now() {
					t.Fatalf("step %d: leased %s removed without force", i, key)
				}
				if err == nil {
					delete(leaseUntil, key) // a later object of that key starts unleased
				}
			case 6:
				fc.Advance([]time.Duration{time.Second, 6 * time.Second, 31 * time.Second, 11 * time.Minute}[arg%4])
			case 7:
				m.Reap(ctx)
			case 8:
				l := leased()
				m.EvictNow(ctx)
				stillThere("eviction", l)
			case 9:
				s := segs[int(arg)%3]
				if arg&4 != 0 {
					m.UnmountSegment(ctx, s.client, s.name, time.Duration(arg&8)*time.Second)
				} else {
					m.MountSegment(ctx, s.client, Segment{Name: s.name, Size: s.size})
				}
			case 10:
				res, _ := m.Heartbeat(ctx, HeartbeatRequest{Client: clients[int(arg)%2], OffloadSlots: int(arg % 3), Disk: &DiskStats{Capacity: 1 << 20}})
				if arg&16 == 0 {
					for _, task := range res.Offload {
						m.OffloadDone(ctx, OffloadResult{Client: "A", Tenant: task.Tenant, Key: task.Key, OK: arg&8 == 0, Bucket: uint64(arg % 2), Length: task.Size})
					}
					break
				}
				// The same results in one BatchOffloadDone, with a result of
				// a key that may be unknown and one with a wrong length: each
				// gets its own answer, and the bad ones change nothing
				// (CheckInvariants below).
				var batch []OffloadResult
				for _, task := range res.Offload {
					batch = append(batch, OffloadResult{Tenant: task.Tenant, Key: task.Key, OK: arg&8 == 0, Bucket: uint64(arg % 2), Length: task.Size})
				}
				batch = append(batch, OffloadResult{Key: key, OK: true, Bucket: 1, Length: uint64(arg)}, OffloadResult{Key: keyOf(arg + 1), OK: true, Length: 1 << 40})
				errs, err := m.BatchOffloadDone(ctx, "A", batch)
				if err == nil && len(errs) != len(batch) {
					t.Fatalf("step %d: %d answers for %d results", i, len(errs), len(batch))
				}
				if err == nil && errs[len(errs)-1] == nil {
					t.Fatalf("step %d: a disk copy of 1 TiB was accepted", i)
				}
			case 11:
				l := leased()
				m.RemoveByRegex(ctx, "", "^k[0-"+fmt.Sprint(arg%6)+"]", false)
				stillThere("RemoveByRegex", l)
			case 12:
				if _, err := m.RemoveAll(ctx, "", true); err != nil {
					t.Fatal(err)
				}
				clear(leaseUntil)
			case 13:
				if err := m.DropBucket(ctx, "A", uint64(arg%2)); err != nil && !kverr.Is(err, kverr.ClientNotFound) {
					t.Fatal(err)
				}
			case 14:
				errs, err := m.RegisterDiskObjects(ctx, "A", []DiskObject{{Key: key, Size: uint64(arg)*3 + 1, Bucket: uint64(arg % 2), Length: uint64(arg)*3 + 1}})
				if err == nil && errs[0] == nil {
					// Success means a COMPLETE object: a new disk-only one,
					// or a replica added to a complete one (never in flight).
					ended[key] = true
				}
			case 15:
				// Reads a client served from its lease cache: they never make
				// an unfinished put readable, and the lease they extend is
				// honoured by eviction and Remove like any other.
				_, err := m.Heartbeat(ctx, HeartbeatRequest{Client: cl, CachedReads: []CachedRead{{Key: key, Count: uint32(arg%4) + 1, LastReadAge: time.Duration(arg) * 100 * time.Millisecond}}})
				if err != nil {
					t.Fatalf("step %d: valid cached read refused: %v", i, err)
				}
				if info, err := m.GetObject(ctx, "", key); err == nil && !info.LeaseDeadline.IsZero() {
					if !ended[key] && info.Complete {
						t.Fatalf("step %d: %s complete before PutEnd", i, key)
					}
					if d := info.LeaseDeadline.UnixNano(); d > leaseUntil[key] && info.Complete {
						leaseUntil[key] = d
					}
				}
			}
			if err := m.CheckInvariants(); err != nil {
				t.Fatalf("step %d (op %d arg %d): %v", i, op, arg, err)
			}
		}
	})
}
