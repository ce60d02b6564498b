package master

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// restartA starts a new incarnation of appliance A (same SSD directory).
func restartA(t *testing.T, m *Master, inc int) {
	t.Helper()
	id := Identity{Incarnation: fmt.Sprint("i", inc), DiskID: "dA"}
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:1", Identity: id, Disk: &DiskStats{Capacity: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	if err := m.MountSegmentAs(ctx, "A", id, Segment{Name: "A/0", Endpoint: "A:1", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
}

func mustRegister(t *testing.T, m *Master, objs ...DiskObject) []error {
	t.Helper()
	errs, err := m.RegisterDiskObjects(ctx, "A", objs)
	if err != nil {
		t.Fatal(err)
	}
	return errs
}

// diskReplicaOf returns key's LOCAL_DISK replica on node (nil: none).
func diskReplicaOf(t *testing.T, m *Master, key, node string) *Replica {
	t.Helper()
	i, err := m.GetObject(ctx, "", key)
	if err != nil {
		return nil
	}
	for _, r := range i.Replicas {
		if r.Type == LocalDisk && r.Node == node {
			return &r
		}
	}
	return nil
}

// A box killed and restarted on the same SSD directory: until it has
// re-registered, its copies stay (an SSD-only object does not vanish, a
// read is told to retry); registered copies are served again, the others
// dropped when it says it is done.
func TestRestartKeepsDiskCopiesUntilRegistered(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff})
	restartA(t, m, 1)
	mountMem(t, m, "B", "B/0", 1<<20)
	put(t, m, "w", "both", 64) // MEMORY on A or B
	if errs := mustRegister(t, m, diskObj("kept", 1, 0), diskObj("lost", 2, 0), diskObj("both", 1, 4096)); errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatal(errs)
	}
	if err := m.EndDiskRegistration(ctx, "A"); err != nil {
		t.Fatal(err)
	}

	restartA(t, m, 2)
	checkInv(t, m)
	for _, k := range []string{"kept", "lost"} {
		if exists(t, m, k) {
			t.Fatalf("%s exists before its copy was re-registered", k)
		}
		_, err := m.GetReplicaList(ctx, "r", "", k)
		wantCode(t, err, kverr.UnavailableInCurrentStatus)
		if !strings.Contains(err.Error(), "A") {
			t.Fatalf("the refusal does not name the node: %v", err)
		}
		if r := diskReplicaOf(t, m, k, "A"); r == nil || !r.Unavailable {
			t.Fatalf("%s: the unconfirmed copy is not listed as unavailable: %+v", k, r)
		}
	}
	if l, err := m.GetReplicaList(ctx, "r", "", "both"); err == nil {
		for _, r := range l.Replicas {
			if r.Type == LocalDisk {
				t.Fatalf("an unconfirmed copy was handed out: %+v", l.Replicas)
			}
		}
	}

	errs := mustRegister(t, m, diskObj("kept", 1, 0))
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if !exists(t, m, "kept") {
		t.Fatal("a re-registered copy is not served")
	}
	if err := m.EndDiskRegistration(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	if exists(t, m, "lost") || diskReplicaOf(t, m, "lost", "A") != nil {
		t.Fatal("a copy the restarted box did not register survived the end of its registration")
	}
	if diskReplicaOf(t, m, "both", "A") != nil {
		t.Fatal("an unregistered copy of an object with other replicas was kept")
	}
	if r := diskReplicaOf(t, m, "kept", "A"); r == nil || r.Unavailable || r.Bucket != 1 {
		t.Fatalf("kept: %+v", r)
	}
}

// A key removed while the restarted box re-registers never comes back
// through that registration, nor does one removed after its offload was
// written but never reported; a copy that was written but not reported is
// adopted by the registration, or dropped at its end, never half-present.
func TestRemoveDuringRestartRegistration(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadImmediate, RemoveSyncTimeout: -1})
	restartA(t, m, 1)
	mountMem(t, m, "B", "B/0", 1<<20)
	// "m": MEMORY on B, acknowledged copy on A's SSD.
	putCfg(t, m, "w", "m", 64, PutConfig{Replicas: 1, PreferredSegment: "B/0"})
	// "o", "p", "q": MEMORY on A; their offloads are taken by A (dispatched)
	// and written, but A dies before it reports them.
	for _, k := range []string{"o", "p", "q"} {
		putCfg(t, m, "w", k, 64, PutConfig{Replicas: 1, PreferredSegment: "A/0"})
	}
	tasks, err := m.TakeOffload(ctx, "A", 16, time.Millisecond)
	if err != nil || len(tasks) != 3 {
		t.Fatalf("tasks %+v, %v", tasks, err)
	}
	if errs := mustRegister(t, m, diskObj("m", 1, 0)); errs[0] != nil {
		t.Fatal(errs[0])
	}

	restartA(t, m, 2)
	checkInv(t, m)
	for _, k := range []string{"o", "p", "q"} {
		_, err := m.GetReplicaList(ctx, "r", "", k)
		wantCode(t, err, kverr.UnavailableInCurrentStatus) // not "no such object": it may be on A's SSD
	}
	// Removed meanwhile.
	for _, k := range []string{"m", "o"} {
		if err := m.Remove(ctx, "", k, true); err != nil {
			t.Fatalf("remove %s: %v", k, err)
		}
	}
	errs := mustRegister(t, m, diskObj("m", 1, 0), diskObj("o", 3, 0), diskObj("p", 3, 4096))
	wantCode(t, errs[0], kverr.ObjectNotFound)
	wantCode(t, errs[1], kverr.ObjectNotFound)
	if errs[2] != nil {
		t.Fatal(errs[2])
	}
	if err := m.EndDiskRegistration(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	checkInv(t, m)
	if exists(t, m, "m") || exists(t, m, "o") {
		t.Fatal("a key removed during the registration came back")
	}
	if r := diskReplicaOf(t, m, "p", "A"); r == nil || r.Unavailable || r.Bucket != 3 || r.Offset != 4096 {
		t.Fatalf("the written, unreported copy of p was not adopted: %+v", r)
	}
	if _, err := m.GetObject(ctx, "", "q"); err == nil {
		t.Fatal("q, never registered, is still listed")
	}
	// The removals reached A, and only then would it apply them.
	_, rs := take(t, m, 0, 0)
	got := map[string]bool{}
	for _, r := range rs {
		got[r.Key] = true
	}
	if !got["m"] || !got["o"] {
		t.Fatalf("removals for the restarted box: %+v", rs)
	}
}

// A box declared gone and back (the same process, thawed) re-registers
// its copies; a key removed between its return and that registration is
// queued for it, so the registration cannot bring it back.
func TestRemoveWhileReturnedApplianceRegisters(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff, RemoveSyncTimeout: -1})
	diskNodeGone(t, m, fc, "g")
	put(t, m, "w", "g", 64) // the same key again, MEMORY on B
	// Back; it has not registered yet when g is removed.
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:7", Disk: &DiskStats{Capacity: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "", "g", true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, mustRegister(t, m, diskObj("g", 1, 0))[0], kverr.ObjectNotFound)
	if exists(t, m, "g") {
		t.Fatal("removed key came back")
	}
	if err := m.EndDiskRegistration(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	// Registered: a later remove of a key A holds no copy of is not queued
	// for it.
	put(t, m, "w", "h", 64)
	if err := m.Remove(ctx, "", "h", true); err != nil {
		t.Fatal(err)
	}
	_, rs := take(t, m, 0, 0)
	for _, r := range rs {
		if r.Key == "h" {
			t.Fatalf("removal of h queued for A after its registration: %+v", rs)
		}
	}
}

// A box that never says its registration is over has its unconfirmed
// copies dropped after DiskRegisterWait.
func TestDiskRegisterWaitExpires(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff, DiskRegisterWait: 10 * time.Second})
	restartA(t, m, 1)
	mustRegister(t, m, diskObj("x", 1, 0), diskObj("y", 1, 4096))
	m.EndDiskRegistration(ctx, "A")
	restartA(t, m, 2)
	mustRegister(t, m, diskObj("x", 1, 0))
	fc.Advance(5 * time.Second)
	restartA(t, m, 2) // beats
	m.Reap(ctx)
	if _, err := m.GetObject(ctx, "", "y"); err != nil {
		t.Fatal("dropped before the wait ended")
	}
	fc.Advance(6 * time.Second)
	restartA(t, m, 2)
	m.Reap(ctx)
	if _, err := m.GetObject(ctx, "", "y"); err == nil {
		t.Fatal("unconfirmed copy kept past DiskRegisterWait")
	}
	if !exists(t, m, "x") {
		t.Fatal("registered copy lost")
	}
}

// DropBucket refuses the placeholder bucket id; registrations and offload
// reports cannot name it either.
func TestNoBucketIsNotABucket(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff})
	restartA(t, m, 1)
	wantCode(t, m.DropBucket(ctx, "A", noBucket), kverr.InvalidParams)
	wantCode(t, mustRegister(t, m, diskObj("x", noBucket, 0))[0], kverr.InvalidParams)
}

// diskModel is appliance A as the master sees it through its calls: an
// SSD tier (durable copies by key), offload tasks taken and not yet
// written, copies written and not yet reported, removals taken.
type diskModel struct {
	ssd        map[string]DiskLocation
	taken      []OffloadTask
	unreported []string
	inc        int
	starting   bool // restarted, registration not done: no removals taken yet
	register   bool // a registration is due (restart, or back from GONE)
	outbox     uint64
	ack        uint64
	nextOff    uint64
}

// runDiskModel drives a master and a model of appliance A (and a memory-only
// node B) through the operations data encodes, and checks after each:
// CheckInvariants (which compares the disk index with a scan of every
// object), that a removed key never comes back until it is put again, that
// a LOCAL_DISK replica the master serves is where A's SSD holds the key
// (never half-present), and, after each registration, that every copy the
// master acknowledged (and nobody removed or dropped since) is served again.
func runDiskModel(t *testing.T, data []byte) {
	m, fc := newTest(t, Config{OffloadMode: OffloadImmediate, RemoveSyncTimeout: -1, ClientTTL: 10 * time.Second, ClientGrace: 20 * time.Second})
	a := &diskModel{ssd: map[string]DiskLocation{}, inc: 1}
	restartA(t, m, a.inc)
	m.EndDiskRegistration(ctx, "A")
	mountMem(t, m, "B", "B/0", 1<<20)
	keyOf := func(b byte) string { return fmt.Sprintf("k%d", b%8) }
	removed := map[string]bool{}       // removed, not put again since
	acked := map[string]DiskLocation{} // copies the master acknowledged on A
	beatA := func() {
		m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:1", Identity: Identity{Incarnation: fmt.Sprint("i", a.inc), DiskID: "dA"}, Disk: &DiskStats{Capacity: 1 << 30}})
	}
	forget := func(k string) { delete(acked, k) }
	for i := 0; i+1 < len(data); i += 2 {
		op, arg := data[i]%14, data[i+1]
		key := keyOf(arg)
		switch op {
		case 0, 1: // put (1: two replicas)
			reps, err := m.PutStart(ctx, PutRequest{Client: "w", Key: key, Size: 64, Config: PutConfig{Replicas: 1 + int(op)}})
			if err == nil && len(reps) > 0 {
				if err := m.PutEnd(ctx, "w", "", key); err != nil {
					t.Fatal(err)
				}
				delete(removed, key)
			}
		case 2: // A takes offload tasks
			if !a.starting {
				tasks, _ := m.TakeOffload(ctx, "A", 1+int(arg%4), time.Microsecond)
				a.taken = append(a.taken, tasks...)
			}
		case 3: // A writes its oldest task durably (an already stored key keeps its copy)
			if len(a.taken) > 0 {
				task := a.taken[0]
				a.taken = a.taken[1:]
				if _, ok := a.ssd[task.Key]; !ok {
					a.ssd[task.Key] = DiskLocation{Bucket: 1 + uint64(arg%3), Offset: a.nextOff}
					a.nextOff += 4096
				}
				a.unreported = append(a.unreported, task.Key)
			}
		case 4: // A reports what it wrote (one BatchOffloadDone)
			if len(a.unreported) == 0 || a.starting {
				break
			}
			var res []OffloadResult
			var keys []string
			for _, k := range a.unreported {
				loc, ok := a.ssd[k]
				if !ok {
					continue // removed on A meanwhile (stillStored)
				}
				keys = append(keys, k)
				res = append(res, OffloadResult{Key: k, OK: true, Bucket: loc.Bucket, Offset: loc.Offset, Length: 64})
			}
			a.unreported = nil
			errs, err := m.BatchOffloadDone(ctx, "A", res)
			if err != nil {
				break
			}
			for j, e := range errs {
				switch {
				case e == nil:
					acked[keys[j]] = a.ssd[keys[j]]
				case kverr.Is(e, kverr.ObjectNotFound):
					delete(a.ssd, keys[j]) // dropUnwanted
				}
			}
		case 5: // A takes and applies removals
			if a.starting {
				break
			}
			ob, rs, err := m.TakeRemovals(ctx, "A", a.outbox, a.ack, 0)
			if err != nil {
				break
			}
			if ob != a.outbox {
				a.outbox, a.ack = ob, 0
			}
			for _, r := range rs {
				keep := map[DiskLocation]bool{}
				for _, l := range r.Keep {
					keep[l] = true
				}
				for k, loc := range a.ssd {
					if !r.Cutoff && k == r.Key || r.Cutoff && !keep[loc] {
						delete(a.ssd, k)
					}
				}
				a.ack = r.Seq
			}
		case 6: // remove
			if err := m.Remove(ctx, "", key, arg&1 == 1); err == nil {
				removed[key] = true
				forget(key)
			}
		case 7: // remove all (force)
			before := map[string]bool{}
			for b := range byte(8) {
				if _, err := m.GetObject(ctx, "", keyOf(b)); err == nil {
					before[keyOf(b)] = true
				}
			}
			if _, err := m.RemoveAll(ctx, "", true); err != nil {
				t.Fatal(err)
			}
			for k := range before {
				if _, err := m.GetObject(ctx, "", k); err != nil {
					removed[k] = true
					forget(k)
				}
			}
		case 8: // kill -9 A and start it again on the same SSD directory
			a.inc++
			a.taken, a.unreported = nil, nil // lost with the process; written copies stay on SSD
			a.outbox, a.ack = 0, 0
			a.starting, a.register = true, true
			restartA(t, m, a.inc)
		case 9: // A (re-)registers its SSD copies, then says it is done
			if !a.register {
				break
			}
			var objs []DiskObject
			var keys []string
			for k, loc := range a.ssd {
				keys = append(keys, k)
				objs = append(objs, DiskObject{Key: k, Size: 64, Length: 64, Bucket: loc.Bucket, Offset: loc.Offset})
			}
			errs, err := m.RegisterDiskObjects(ctx, "A", objs)
			if err != nil {
				break
			}
			for j, e := range errs {
				if kverr.Is(e, kverr.ObjectAlreadyExists) || kverr.Is(e, kverr.ObjectNotFound) {
					delete(a.ssd, keys[j]) // refused: the appliance removes its copy
				}
			}
			if err := m.EndDiskRegistration(ctx, "A"); err != nil {
				t.Fatal(err)
			}
			a.starting, a.register = false, false
			for k, loc := range acked {
				r := diskReplicaOf(t, m, k, "A")
				if r == nil || r.Unavailable || r.Bucket != loc.Bucket || r.Offset != loc.Offset {
					t.Fatalf("step %d: acknowledged copy of %s at %+v not served after registration: %+v", i, k, loc, r)
				}
			}
		case 10: // A's bucket evicted (the master agrees first)
			b := 1 + uint64(arg%3)
			if err := m.DropBucket(ctx, "A", b); err == nil {
				for k, loc := range a.ssd {
					if loc.Bucket == b {
						delete(a.ssd, k)
						forget(k)
					}
				}
			}
		case 11: // A silent past TTL+grace: gone; then back (the same process)
			fc.Advance(31 * time.Second)
			m.Heartbeat(ctx, HeartbeatRequest{Client: "B", Endpoint: "B:1"})
			m.Reap(ctx)
			clear(acked) // dropped with the gone node
			beatA()
			a.register = true
		case 12:
			m.EvictNow(ctx)
		case 13:
			fc.Advance(time.Duration(arg%4) * time.Second)
			beatA()
			m.Heartbeat(ctx, HeartbeatRequest{Client: "B", Endpoint: "B:1"})
			m.Reap(ctx)
		}
		if testing.Verbose() {
			t.Logf("step %d: op %d arg %d (%s) A ssd %v", i, op, arg, key, a.ssd)
		}
		if err := m.CheckInvariants(); err != nil {
			t.Fatalf("step %d (op %d arg %d): %v", i, op, arg, err)
		}
		for k := range removed {
			if _, err := m.GetObject(ctx, "", k); err == nil {
				t.Fatalf("step %d (op %d): removed key %s came back", i, op, k)
			}
		}
		for b := range byte(8) {
			k := keyOf(b)
			r := diskReplicaOf(t, m, k, "A")
			if r == nil || r.Unavailable {
				continue
			}
			if loc, ok := a.ssd[k]; !ok || loc.Bucket != r.Bucket || loc.Offset != r.Offset {
				t.Fatalf("step %d (op %d): the master serves %s from A bucket %d offset %d; A's SSD holds %+v (%v)", i, op, k, r.Bucket, r.Offset, loc, ok)
			}
		}
	}
}

func FuzzDiskIndex(f *testing.F) {
	f.Add([]byte{0, 1, 2, 4, 3, 0, 4, 0, 8, 0, 6, 1, 9, 0})
	f.Add([]byte{1, 2, 2, 4, 3, 1, 8, 0, 6, 2, 9, 0, 5, 0, 10, 1})
	f.Add([]byte{0, 3, 2, 1, 3, 2, 4, 0, 11, 0, 7, 0, 9, 0, 5, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 600 {
			data = data[:600]
		}
		runDiskModel(t, data)
	})
}

// TestDiskIndexRandomOps is FuzzDiskIndex on fixed random sequences, so
// every run of the package checks them.
func TestDiskIndexRandomOps(t *testing.T) {
	n := uint64(200)
	if testing.Short() {
		n = 20
	}
	for seed := range n {
		r := rand.New(rand.NewPCG(seed, 7))
		data := make([]byte, 400)
		for i := range data {
			data[i] = byte(r.UintN(256))
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runDiskModel(t, data) })
	}
}

// An offload task a restarted (or lost) box will never finish is offered
// again, with "immediate", from another box's DRAM copy: the object would
// otherwise hold no SSD copy until eviction.
func TestVoidedOffloadOfferedAgain(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadImmediate, RemoveSyncTimeout: -1})
	restartA(t, m, 1)
	beatB := func() {
		if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "B", Endpoint: "B:1", Disk: &DiskStats{Capacity: 1 << 30}}); err != nil {
			t.Fatal(err)
		}
	}
	beatB()
	mountMem(t, m, "B", "B/0", 1<<20)
	for _, k := range []string{"x", "y"} {
		putCfg(t, m, "w", k, 64, PutConfig{Replicas: 2, PreferredSegment: "A/0"})
	}
	if tasks, err := m.TakeOffload(ctx, "A", 16, time.Millisecond); err != nil || len(tasks) != 2 {
		t.Fatalf("tasks of A: %+v, %v", tasks, err)
	}
	restartA(t, m, 2)
	tasks, err := m.TakeOffload(ctx, "B", 16, time.Millisecond)
	if err != nil || len(tasks) != 2 || tasks[0].Source.Node != "B" {
		t.Fatalf("the voided offloads are not offered to B: %+v, %v", tasks, err)
	}
	m.EndDiskRegistration(ctx, "A")
	// Lost instead of restarted: the same.
	putCfg(t, m, "w", "z", 64, PutConfig{Replicas: 2, PreferredSegment: "A/0"})
	if tasks, err := m.TakeOffload(ctx, "A", 16, time.Millisecond); err != nil || len(tasks) != 1 {
		t.Fatalf("tasks of A: %+v, %v", tasks, err)
	}
	fc.Advance(DefaultClientTTL + DefaultClientGrace + time.Second)
	beatB()
	m.Reap(ctx)
	if tasks, err := m.TakeOffload(ctx, "B", 16, time.Millisecond); err != nil || len(tasks) != 1 || tasks[0].Key != "z" {
		t.Fatalf("the offload voided by A's loss is not offered to B: %+v, %v", tasks, err)
	}
}

// A late call of the process a restart replaced is refused: taking the
// name back (same SSD directory) would void its successor's registration.
func TestReplacedIncarnationRefused(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff})
	restartA(t, m, 1)
	mustRegister(t, m, diskObj("x", 1, 0))
	m.EndDiskRegistration(ctx, "A")
	restartA(t, m, 2)
	mustRegister(t, m, diskObj("x", 1, 0))
	m.EndDiskRegistration(ctx, "A")
	_, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:1", Identity: Identity{Incarnation: "i1", DiskID: "dA"}, Disk: &DiskStats{Capacity: 1 << 30}})
	wantCode(t, err, kverr.IllegalClient)
	if !exists(t, m, "x") {
		t.Fatal("a late beat of the replaced process voided its successor's copies")
	}
}

// A box restarted on another SSD directory (another DiskID) cannot bring
// back the old directory's copies: they are dropped at once, and its
// registration is a first one (every copy it holds is taken).
func TestRestartOnAnotherDisk(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff})
	restartA(t, m, 1)
	mustRegister(t, m, diskObj("old", 1, 0))
	m.EndDiskRegistration(ctx, "A")
	id := Identity{Incarnation: "i2", DiskID: "other"}
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:1", Identity: id, Disk: &DiskStats{Capacity: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetObject(ctx, "", "old"); err == nil {
		t.Fatal("a copy of the old directory survived a restart on another one")
	}
	if errs := mustRegister(t, m, diskObj("new", 1, 0)); errs[0] != nil {
		t.Fatalf("the new directory's copy refused: %v", errs[0])
	}
}
