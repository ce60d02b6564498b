package master

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
)

// dirTwin stands in for an appliance's DRAM directory (appliance/dramdir.go
// is the real one, proved in tests/): it takes records from m and applies
// them to a map until stopped.
type dirTwin struct {
	mu      sync.Mutex
	entries map[string]DramObject // "segment@offset" → object
	stop    context.CancelFunc
	done    chan struct{}
}

func startTwin(m *Master, node string) *dirTwin {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dirTwin{entries: map[string]DramObject{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		var outbox, ack uint64
		for ctx.Err() == nil {
			ob, reset, rs, err := m.TakeDramRecords(ctx, node, outbox, ack, 50*time.Millisecond)
			if err != nil {
				return
			}
			outbox = ob
			d.mu.Lock()
			if reset {
				clear(d.entries)
			}
			for _, r := range rs {
				at := fmt.Sprintf("%s@%d", r.Segment, r.Offset)
				if r.Free {
					delete(d.entries, at)
				} else {
					d.entries[at] = DramObject{Tenant: r.Tenant, Key: r.Key, Segment: r.Segment, Offset: r.Offset, Size: r.Size,
						CRC32C: r.CRC32C, HasChecksum: r.HasChecksum, Version: r.Version}
				}
				ack = r.Seq
			}
			d.mu.Unlock()
		}
	}()
	return d
}

func (d *dirTwin) close() { d.stop(); <-d.done }

func (d *dirTwin) objects() []DramObject {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []DramObject
	for _, o := range d.entries {
		out = append(out, o)
	}
	return out
}

// boxWithDirectory makes node "box" keep a DRAM directory on m (a
// heartbeat saying so, one 1 MiB segment mounted) and starts its twin.
func boxWithDirectory(t *testing.T, m *Master) (Segment, *dirTwin) {
	t.Helper()
	seg := Segment{Name: "box/mem0", Endpoint: "box:1", Size: 1 << 20}
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "box", seg.Name, seg.Size)
	return seg, startTwin(m, "box")
}

// TestDramRebuild: a master's committed DRAM objects reach the holder's
// directory before PutEnd answers and leave it before Remove answers; a
// new master rebuilt from the directory serves the same extents, refuses
// overlaps and puts while the report is due, and allocates around them.
func TestDramRebuild(t *testing.T) {
	m, _ := newTest(t, Config{})
	seg, twin := boxWithDirectory(t, m)
	defer twin.close()
	placed := map[string]uint64{}
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		placed[k] = put(t, m, "writer", k, 1000+uint64(i))[0].Offset
		if n := len(twin.objects()); n != i+1 { // PutEnd waited for the directory
			t.Fatalf("after PutEnd %s the directory holds %d objects, want %d", k, n, i+1)
		}
	}
	for i := 0; i < 40; i += 4 {
		k := fmt.Sprintf("k%02d", i)
		if err := m.Remove(ctx, "", k, true); err != nil {
			t.Fatal(err)
		}
		delete(placed, k)
	}
	dir := twin.objects()
	if len(dir) != len(placed) {
		t.Fatalf("directory holds %d objects after removals, want %d", len(dir), len(placed))
	}

	// A new master: the appliance beats, is unknown, reports.
	m2, _ := newTest(t, Config{})
	rep, err := m2.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true,
		DramObjects: uint64(len(dir)), Segments: []Segment{seg}})
	if err != nil || rep.Known {
		t.Fatalf("heartbeat to a new master: known %v, err %v", rep.Known, err)
	}
	if ok, why := m2.Rebuilding(); !ok {
		t.Fatal("not rebuilding while the report is due")
	} else {
		t.Logf("rebuilding: %s", why)
	}
	_, err = m2.PutStart(ctx, putReq("writer", "new", 100))
	wantCode(t, err, kverr.UnavailableInCurrentStatus)
	_, err = m2.GetReplicaList(ctx, "c", "", "k01")
	wantCode(t, err, kverr.UnavailableInCurrentStatus)

	bad := DramObject{Key: "overlap", Segment: seg.Name, Offset: placed["k01"], Size: 64}
	res, err := m2.RegisterDramObjects(ctx, "box", "", append(dir, bad), true)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res[:len(dir)] {
		if e != nil {
			t.Fatalf("%s not restored: %v", dir[i].Key, e)
		}
	}
	wantCode(t, res[len(dir)], kverr.NoAvailableHandle)
	for k, off := range placed {
		rl, err := m2.GetReplicaList(ctx, "c", "", k)
		if err != nil || rl.Replicas[0].Offset != off || rl.Replicas[0].Segment != seg.Name {
			t.Fatalf("%s after rebuild: %+v, %v (want offset %d)", k, rl, err, off)
		}
	}
	// Removed keys stay removed: the frees reached the directory first.
	_, err = m2.GetReplicaList(ctx, "c", "", "k00")
	wantCode(t, err, kverr.UnavailableInCurrentStatus) // the rebuild window still runs: a miss is "retry"
	if got := ctrOf(m2, "dram_objects_restored"); got != uint64(len(dir)) {
		t.Fatalf("dram_objects_restored = %d, want %d", got, len(dir))
	}
	// New puts fill the space around the restored extents.
	for i := range 200 {
		r, err := m2.PutStart(ctx, putReq("writer", fmt.Sprintf("n%03d", i), 1000))
		if err != nil {
			break
		}
		for k, off := range placed {
			var size uint64
			fmt.Sscanf(k, "k%d", &size)
			if r[0].Offset < off+1000+size && off < r[0].Offset+1000 {
				t.Fatalf("new put at %d overlaps restored %s at %d", r[0].Offset, k, off)
			}
		}
	}
	// A second report of the same object (another holder) with other bytes is refused.
	res, _ = m2.RegisterDramObjects(ctx, "box", "", []DramObject{{Key: "k01", Segment: seg.Name, Offset: 0, Size: 5, Version: 1}}, true)
	if res[0] == nil {
		t.Fatal("a conflicting report of k01 was accepted")
	}
}

// TestDramPutEndBounded: a holder that keeps a directory but does not take
// records delays PutEnd by DramSyncTimeout at most; the put still succeeds
// and the miss is counted.
func TestDramPutEndBounded(t *testing.T) {
	m, _ := newTest(t, Config{DramSyncTimeout: 100 * time.Millisecond})
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	start := time.Now()
	put(t, m, "w", "k", 100)
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("PutEnd took %v with a silent holder (timeout 100ms)", d)
	}
	if ctrOf(m, "dram_commits_unconfirmed") != 1 {
		t.Fatal("unconfirmed commit not counted")
	}
	// A revoke does not wait for a holder with no records stream open (a
	// put is revoked mostly because a write failed, often as its holder
	// died): a master with a 5 s bound answers at once.
	m5, _ := newTest(t, Config{DramSyncTimeout: 5 * time.Second})
	if _, err := m5.Heartbeat(ctx, HeartbeatRequest{Client: "box", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m5, "box", "box/mem0", 1<<20)
	if _, err := m5.PutStart(ctx, PutRequest{Client: "w", Key: "r", Size: 100, CRC32C: 7, HasChecksum: true, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := m5.PutRevoke(ctx, "w", "", "r"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("PutRevoke waited %v for a holder with no stream open", d)
	}
	// A GPU node (no directory) costs PutEnd nothing.
	mountMem(t, m, "gpu", "gpu/mem0", 1<<20)
	start = time.Now()
	putCfg(t, m, "w", "k2", 100, PutConfig{Replicas: 1, PreferredSegment: "gpu/mem0"})
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("PutEnd on a node without a directory took %v", d)
	}
}

// TestDramForgottenNodeWaits: a node forgotten (declared gone, or
// restarted) while its records stream is open gets an empty answer after
// the poll's wait, not at once: the stream would spin on it otherwise.
func TestDramForgottenNodeWaits(t *testing.T) {
	m, _ := newTest(t, Config{})
	if err := m.AckDramRecords("box", m.dram.id, 0); err != nil {
		t.Fatal(err)
	}
	m.dram.forget("box")
	start := time.Now()
	_, _, rs, err := m.NextDramRecords(ctx, "box", 0, 100*time.Millisecond)
	if err != nil || len(rs) != 0 {
		t.Fatalf("records for a forgotten node: %v, %v", rs, err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("a forgotten node's poll answered after %v, want the poll's 100ms", d)
	}
	if _, _, _, err := m.NextDramRecords(ctx, "box", 0, 0); err != nil { // no wait asked: at once
		t.Fatal(err)
	}
}

// TestDramRegisterRefusals: bad reports change nothing.
func TestDramRegisterRefusals(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "box", "box/mem0", 1<<20)
	mountMem(t, m, "other", "other/mem0", 1<<20)
	_, err := m.RegisterDramObjects(ctx, "nobody", "", nil, true)
	wantCode(t, err, kverr.ClientNotFound)
	res, err := m.RegisterDramObjects(ctx, "box", "", []DramObject{
		{Key: "a", Segment: "other/mem0", Offset: 0, Size: 10},    // not its segment
		{Key: "b", Segment: "box/mem0", Offset: 3, Size: 10},      // misaligned
		{Key: "c", Segment: "box/mem0", Offset: 1 << 20, Size: 1}, // outside
		{Key: "", Segment: "box/mem0", Offset: 0, Size: 10},       // bad key
		{Key: "d", Segment: "nope", Offset: 0, Size: 10},          // not mounted
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []kverr.Code{kverr.IllegalClient, kverr.InvalidParams, kverr.InvalidParams, kverr.InvalidKey, kverr.SegmentNotFound}
	for i, e := range res {
		wantCode(t, e, want[i])
	}
	if segUsed(m, "box/mem0") != 0 || segUsed(m, "other/mem0") != 0 {
		t.Fatal("a refused report took space")
	}
}

// FuzzAllocatorReserve checks alloc, release and reserve against a model
// of taken units: reserve succeeds exactly when every unit is free.
func FuzzAllocatorReserve(f *testing.F) {
	f.Add([]byte{0, 3, 1, 2, 5, 2, 0, 4})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const units, align = 64, 8
		a := newAllocator(units*align, align)
		taken := make([]bool, units)
		type ext struct{ off, n uint64 }
		var live []ext
		for i := 0; i+2 < len(ops); i += 3 {
			op, x, y := ops[i]%3, uint64(ops[i+1]%units), uint64(ops[i+2]%8)+1
			switch op {
			case 0:
				off, n, ok := a.alloc(y * align)
				if ok {
					for u := off / align; u < (off+n)/align; u++ {
						if taken[u] {
							t.Fatalf("alloc gave taken unit %d", u)
						}
						taken[u] = true
					}
					live = append(live, ext{off, n})
				}
			case 1:
				if len(live) == 0 {
					continue
				}
				e := live[int(x)%len(live)]
				live = append(live[:int(x)%len(live)], live[int(x)%len(live)+1:]...)
				if !a.release(e.off, e.n) {
					t.Fatalf("release of a live extent refused")
				}
				for u := e.off / align; u < (e.off+e.n)/align; u++ {
					taken[u] = false
				}
			case 2:
				free := x+y <= units
				for u := x; free && u < x+y; u++ {
					free = !taken[u]
				}
				if got := a.reserve(x*align, y*align); got != free {
					t.Fatalf("reserve [%d,+%d) = %v, model says %v", x, y, got, free)
				}
				if free {
					for u := x; u < x+y; u++ {
						taken[u] = true
					}
					live = append(live, ext{x * align, y * align})
				}
			}
			n := uint64(0)
			for _, tk := range taken {
				if !tk {
					n++
				}
			}
			if a.free != n*align {
				t.Fatalf("free %d, model %d", a.free, n*align)
			}
		}
	})
}

// TestDramForgetAfterGone: an appliance declared gone lost its replicas
// (and keys may be removed or put again meanwhile): when it comes back it
// is told to clear its directory, and its segments wait for its (empty)
// report before taking puts.
func TestDramForgetAfterGone(t *testing.T) {
	m, fc := newTest(t, Config{ClientTTL: time.Second, ClientGrace: time.Second, DramSyncTimeout: -1})
	seg := Segment{Name: "box/mem0", Endpoint: "box:1", Size: 1 << 20}
	beat := func() HeartbeatReply {
		t.Helper()
		rep, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true, DramObjects: 1, Segments: []Segment{seg}})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := beat(); rep.ForgetDram {
		t.Fatal("first contact told to forget")
	}
	if _, err := m.RegisterDramObjects(ctx, "box", "", nil, true); err != nil {
		t.Fatal(err)
	}
	put(t, m, "w", "k", 100)
	fc.Advance(3 * time.Second)
	m.Reap(ctx)
	if exists(t, m, "k") {
		t.Fatal("object of a gone appliance still listed")
	}
	rep := beat()
	if rep.Known || !rep.ForgetDram {
		t.Fatalf("back from gone: known %v, forget %v; want false, true", rep.Known, rep.ForgetDram)
	}
	_, err := m.PutStart(ctx, putReq("w", "k2", 100))
	wantCode(t, err, kverr.UnavailableInCurrentStatus)
	if _, err := m.RegisterDramObjects(ctx, "box", "", nil, true); err != nil {
		t.Fatal(err)
	}
	put(t, m, "w", "k2", 100)
	if ok, why := m.Rebuilding(); ok && !m.restarted.Load() {
		t.Fatalf("still rebuilding after the report: %s", why)
	}
}

// TestFenceRefusesMutations: a deposed leader answers NOT_LEADER to puts
// and removals and reports it is not the leader; reads still answer.
func TestFenceRefusesMutations(t *testing.T) {
	m, _ := newTest(t, Config{LeaderEpoch: 7})
	mountMem(t, m, "box", "box/mem0", 1<<20)
	put(t, m, "w", "k", 100)
	m.Fence()
	s := NewGRPCServer(m)
	_, err := s.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "w", Key: []byte("k2"), Size: 10})
	wantCode(t, kverr.FromGRPC(err), kverr.NotLeader)
	_, err = s.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "w", Key: []byte("k")})
	wantCode(t, kverr.FromGRPC(err), kverr.NotLeader)
	_, err = s.Remove(ctx, &kvtierpb.KeyRequest{Key: []byte("k"), Force: true})
	wantCode(t, kverr.FromGRPC(err), kverr.NotLeader)
	if st := m.Stats(ctx); st.Leader {
		t.Fatal("a fenced master reports itself leader")
	}
	if !exists(t, m, "k") {
		t.Fatal("a refused remove removed")
	}
}

// TestDramCommitAtPutStart: a put with the client's checksum has its commit
// record queued at PutStart (it travels while the client writes), so its
// PutEnd finds it applied and does not wait; its version is the PutStart
// time, the same for both replicas. A revoke answers once the entry left
// the directory, a taken-over put's entry is freed before its space can be
// reused, and a put a new master rebuilt before the writer's PutEnd arrived
// ends successfully for that writer.
func TestDramCommitAtPutStart(t *testing.T) {
	m, fc := newTest(t, Config{DramSyncTimeout: 5 * time.Second})
	for _, node := range []string{"box", "box2"} {
		if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: node, Endpoint: node + ":1", DramDirectory: true}); err != nil {
			t.Fatal(err)
		}
		mountMem(t, m, node, node+"/mem0", 1<<20)
	}
	twins := []*dirTwin{startTwin(m, "box"), startTwin(m, "box2")}
	defer twins[0].close()
	defer twins[1].close()
	held := func() int { return len(twins[0].objects()) + len(twins[1].objects()) }
	sum := PutRequest{Client: "w", Key: "a", Size: 4096, CRC32C: 0xfeed, HasChecksum: true, Config: PutConfig{Replicas: 2}}
	if _, err := m.PutStart(ctx, sum); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for held() != 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if held() != 2 {
		t.Fatalf("after PutStart the directories hold %d entries, want 2 (one per replica)", held())
	}
	for _, tw := range twins {
		o := tw.objects()[0]
		if o.Key != "a" || o.CRC32C != 0xfeed || !o.HasChecksum || o.Version != fc.Now().UnixNano() {
			t.Fatalf("commit record %+v: want key a, crc feed, version = PutStart time %d", o, fc.Now().UnixNano())
		}
	}
	// The records are applied: PutEnd does not wait even with both twins
	// stopped (a wait would take DramSyncTimeout, 5 s).
	twins[0].close()
	twins[1].close()
	start := time.Now()
	if err := m.PutEnd(ctx, "w", "", "a"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("PutEnd of a put whose record was applied took %v", d)
	}
	if n := ctrOf(m, "dram_commits_unconfirmed"); n != 0 {
		t.Fatalf("dram_commits_unconfirmed = %d", n)
	}
	twins = []*dirTwin{startTwin(m, "box"), startTwin(m, "box2")}
	defer twins[0].close()
	defer twins[1].close()

	// A revoke answers once the entries are gone.
	sum.Key = "b"
	if _, err := m.PutStart(ctx, sum); err != nil {
		t.Fatal(err)
	}
	if err := m.PutRevoke(ctx, "w", "", "b"); err != nil {
		t.Fatal(err)
	}
	for _, tw := range twins {
		for _, o := range tw.objects() {
			if o.Key == "b" {
				t.Fatalf("revoked put b still in a directory after PutRevoke answered: %+v", o)
			}
		}
	}
	// Batch revokes too, with one wait for the batch.
	for _, k := range []string{"b1", "b2"} {
		sum.Key = k
		if _, err := m.PutStart(ctx, sum); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range m.BatchPutRevoke(ctx, "w", "", []string{"b1", "b2"}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tw := range twins {
		for _, o := range tw.objects() {
			if o.Key == "b1" || o.Key == "b2" {
				t.Fatalf("batch-revoked put %s still in a directory: %+v", o.Key, o)
			}
		}
	}

	// An abandoned put taken over: its entries are freed at once.
	sum.Key, sum.Config.Replicas = "c", 1
	if _, err := m.PutStart(ctx, sum); err != nil {
		t.Fatal(err)
	}
	fc.Advance(m.cfg.PutDiscardTimeout + time.Second)
	sum.Client = "w2"
	if _, err := m.PutStart(ctx, sum); err != nil {
		t.Fatal(err)
	}
	if err := m.PutEnd(ctx, "w2", "", "c"); err != nil {
		t.Fatal(err)
	}
	// The new put's entry is there when PutEnd answers. The abandoned
	// one's free was queued at the take-over, to the node that held it,
	// which may be the other one (one replica each): PutEnd waits for its
	// own node only, so the free lands soon, not necessarily before.
	newVersion := fc.Now().UnixNano()
	cs := func() (n int, fresh bool) {
		for _, tw := range twins {
			for _, o := range tw.objects() {
				if o.Key == "c" {
					n++
					fresh = fresh || o.Version == newVersion
				}
			}
		}
		return n, fresh
	}
	if _, fresh := cs(); !fresh {
		t.Fatal("the new put of c is in no directory when its PutEnd answered")
	}
	until := time.Now().Add(5 * time.Second)
	for n, _ := cs(); n != 1 && time.Now().Before(until); n, _ = cs() {
		time.Sleep(time.Millisecond)
	}
	if n, fresh := cs(); n != 1 || !fresh {
		t.Fatalf("key c in the directories %d times after the take-over (the new put among them: %v), want once, the new put", n, fresh)
	}

	// A new master rebuilt "d" from the directory before the writer's
	// PutEnd: the writer's PutEnd succeeds, another PutRevoke cannot undo it.
	m2, _ := newTest(t, Config{})
	if _, err := m2.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true,
		Segments: []Segment{{Name: "box/mem0", Endpoint: "box:1", Size: 1 << 20}}}); err != nil {
		t.Fatal(err)
	}
	res, err := m2.RegisterDramObjects(ctx, "box", "", []DramObject{{Key: "d", Segment: "box/mem0", Offset: 1 << 16, Size: 4096,
		CRC32C: 1, HasChecksum: true, Version: 7}}, true)
	if err != nil || res[0] != nil {
		t.Fatalf("register: %v %v", res, err)
	}
	if err := m2.PutEnd(ctx, "w", "", "d"); err != nil {
		t.Fatalf("the writer's PutEnd of a rebuilt put: %v", err)
	}
	wantCode(t, m2.PutRevoke(ctx, "w", "", "d"), kverr.UnavailableInCurrentStatus)
}

// FuzzDramOutbox drives one master's outbox with records added for two
// nodes, acknowledgements (some naming another outbox, some stale; never
// past the last seq handed out, as an appliance acknowledges what it
// received) and checks, against a model, that a wait for (node, seq) is
// settled exactly when no record of that node up to seq is unacknowledged:
// by the fast check (settled) and by waitAcked with no time to wait.
func FuzzDramOutbox(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 0, 3, 2, 0})
	f.Add([]byte{0, 0, 0, 1, 1, 1, 2, 1, 5, 3, 0, 1})
	f.Add([]byte("0001101010000070"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		m, _ := newTest(t, Config{})
		q := &m.dram
		nodes := []string{"a", "b"}
		for _, n := range nodes {
			if err := m.AckDramRecords(n, q.id, 0); err != nil { // starts its queue
				t.Fatal(err)
			}
		}
		type rec struct {
			seq   uint64
			acked bool
		}
		model := map[string][]rec{}
		var waits []dramWait
		for len(ops) >= 2 {
			op, arg := ops[0]%4, ops[1]
			ops = ops[2:]
			node := nodes[arg%2]
			switch op {
			case 0: // a record for node
				q.mu.Lock()
				seq := q.addLocked(node, DramRecord{Segment: "s", Offset: uint64(arg)}, false)
				q.mu.Unlock()
				model[node] = append(model[node], rec{seq: seq})
				// A put with replicas on both nodes waits for each at its
				// highest seq (dramWaitsLocked), a seq of the other node.
				waits = append(waits, dramWait{node, seq}, dramWait{nodes[(arg+1)%2], seq})
			case 1, 2: // node acknowledges through a seq (op 2: another outbox's)
				q.mu.Lock()
				through := min(uint64(arg/2), q.next)
				q.mu.Unlock()
				outbox := q.id
				if op == 2 {
					outbox ^= 2
				}
				if err := m.AckDramRecords(node, outbox, through); err != nil {
					t.Fatal(err)
				}
				if outbox == q.id {
					for i := range model[node] {
						if model[node][i].seq <= through {
							model[node][i].acked = true
						}
					}
				}
			case 3: // check every wait so far
				for _, w := range waits {
					want := true
					for _, r := range model[w.node] {
						if r.seq <= w.seq && !r.acked {
							want = false
						}
					}
					if got := q.settled([]dramWait{w}) == 1; got != want {
						t.Fatalf("wait %+v: settled %v, model %v", w, got, want)
					}
					if late := q.waitAcked(context.Background(), []dramWait{w}, 0); (len(late) == 0) != want {
						t.Fatalf("wait %+v: waitAcked late %v, model settled %v", w, late, want)
					}
				}
			}
		}
	})
}

// TestDramChecksumAtPutEnd: a put whose PutStart carried no checksum gets
// the one its PutEnd carries (kvtierpb.KeyRequest.crc32c): readers see it,
// and the commit record, sent only now, carries it to the directory before
// PutEnd answers. A PutEnd checksum contradicting PutStart's is refused
// and the put stays in flight; a retried PutEnd with the same one is fine.
func TestDramChecksumAtPutEnd(t *testing.T) {
	m, _ := newTest(t, Config{DramSyncTimeout: 5 * time.Second})
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	twin := startTwin(m, "box")
	defer twin.close()
	s := &grpcServer{m: m}
	end := func(key string, crc uint32, has bool) error {
		_, err := s.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "w", Key: []byte(key), Crc32C: crc, HasChecksum: has})
		return kverr.FromGRPC(err)
	}

	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "late", Size: 4096, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := len(twin.objects()); n != 0 {
		t.Fatalf("a put without a checksum has %d directory entries before PutEnd", n)
	}
	if err := end("late", 0xfeed, true); err != nil {
		t.Fatal(err)
	}
	dir := twin.objects()
	if len(dir) != 1 || dir[0].Key != "late" || !dir[0].HasChecksum || dir[0].CRC32C != 0xfeed {
		t.Fatalf("directory after PutEnd: %+v, want late with crc feed", dir)
	}
	l, err := m.GetReplicaList(ctx, "r", "", "late")
	if err != nil || !l.HasChecksum || l.CRC32C != 0xfeed {
		t.Fatalf("replica list %+v, %v: want checksum feed", l, err)
	}
	if err := end("late", 0xfeed, true); err != nil {
		t.Fatalf("retried PutEnd: %v", err)
	}
	wantCode(t, end("late", 0xbad, true), kverr.ChecksumMismatch)

	// A PutStart checksum wins: a PutEnd contradicting it is refused and
	// the put is still in flight (the client revokes it).
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "early", Size: 4096, CRC32C: 7, HasChecksum: true, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, end("early", 8, true), kverr.ChecksumMismatch)
	_, err = m.GetReplicaList(ctx, "r", "", "early")
	wantCode(t, err, kverr.ReplicaIsNotReady)
	if err := end("early", 7, true); err != nil {
		t.Fatal(err)
	}
	if l, err := m.GetReplicaList(ctx, "r", "", "early"); err != nil || l.CRC32C != 7 {
		t.Fatalf("early: %+v, %v", l, err)
	}

	// Without a checksum at either end the object has none, as before.
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "none", Size: 4096, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := end("none", 0, false); err != nil {
		t.Fatal(err)
	}
	if l, err := m.GetReplicaList(ctx, "r", "", "none"); err != nil || l.HasChecksum {
		t.Fatalf("none: %+v, %v: want no checksum", l, err)
	}
}

// TestRemoveWaitsForRebuild: a removal that reaches a master before the
// appliance has reported the key waits for the report and removes it (a
// "not found" answer would let the report bring it back); a bulk removal
// waits for the whole rebuild; without the report within RemoveSyncTimeout
// the answer is UNAVAILABLE_IN_CURRENT_STATUS, never OBJECT_NOT_FOUND.
func TestRemoveWaitsForRebuild(t *testing.T) {
	m, _ := newTest(t, Config{})
	seg, twin := boxWithDirectory(t, m)
	for _, k := range []string{"k1", "k2", "k3"} {
		put(t, m, "writer", k, 1000)
	}
	dir := twin.objects()
	twin.close()

	rebuilding := func(cfg Config) (*Master, *clock.Fake) {
		m2, fc := newTest(t, cfg)
		if _, err := m2.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true,
			DramObjects: uint64(len(dir)), Segments: []Segment{seg}}); err != nil {
			t.Fatal(err)
		}
		if ok, _ := m2.Rebuilding(); !ok {
			t.Fatal("not rebuilding while the report is due")
		}
		return m2, fc
	}
	m2, fc := rebuilding(Config{})
	twin2 := startTwin(m2, "box")
	defer twin2.close()
	one, bulk := make(chan error, 1), make(chan error, 1)
	go func() { one <- m2.Remove(ctx, "", "k1", true) }()
	go func() {
		n, err := m2.RemoveByRegex(ctx, "", "^k2$", true)
		if err == nil && n != 1 {
			err = fmt.Errorf("removed %d objects, want 1", n)
		}
		bulk <- err
	}()
	select {
	case err := <-one:
		t.Fatalf("Remove answered before the report: %v", err)
	case err := <-bulk:
		t.Fatalf("RemoveByRegex answered before the report: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := m2.RegisterDramObjects(ctx, "box", "", dir, true); err != nil {
		t.Fatal(err)
	}
	if err := <-one; err != nil {
		t.Fatalf("Remove of a reported key: %v", err)
	}
	fc.Advance(m2.cfg.RebuildWindow + time.Second) // the rebuild window ends
	if err := <-bulk; err != nil {
		t.Fatalf("RemoveByRegex after the rebuild: %v", err)
	}
	for _, k := range []string{"k1", "k2"} {
		_, err := m2.GetReplicaList(ctx, "c", "", k)
		wantCode(t, err, kverr.ObjectNotFound)
	}
	if _, err := m2.GetReplicaList(ctx, "c", "", "k3"); err != nil {
		t.Fatalf("k3 (kept): %v", err)
	}

	// Before any appliance was heard from (a restarted master, the
	// appliances' first heartbeats still to come): the same wait.
	m4, fc4 := newTest(t, Config{})
	early := make(chan error, 1)
	go func() { early <- m4.Remove(ctx, "", "k3", true) }()
	select {
	case err := <-early:
		t.Fatalf("Remove answered before any appliance was heard from: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := m4.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", DramDirectory: true,
		DramObjects: uint64(len(dir)), Segments: []Segment{seg}}); err != nil {
		t.Fatal(err)
	}
	twin4 := startTwin(m4, "box")
	defer twin4.close()
	if _, err := m4.RegisterDramObjects(ctx, "box", "", dir, true); err != nil {
		t.Fatal(err)
	}
	if err := <-early; err != nil {
		t.Fatalf("Remove of a key reported after it was asked: %v", err)
	}
	fc4.Advance(m4.cfg.RebuildWindow + time.Second)
	_, err := m4.GetReplicaList(ctx, "c", "", "k3")
	wantCode(t, err, kverr.ObjectNotFound)
	// Past the window with no appliance heard from, a miss is a miss.
	m5, fc5 := newTest(t, Config{})
	fc5.Advance(m5.cfg.RebuildWindow + time.Second)
	wantCode(t, m5.Remove(ctx, "", "k3", true), kverr.ObjectNotFound)

	// No report within the bound: "retry", never "not found".
	m3, _ := rebuilding(Config{RemoveSyncTimeout: 30 * time.Millisecond})
	wantCode(t, m3.Remove(ctx, "", "k1", true), kverr.UnavailableInCurrentStatus)
	_, err = m3.RemoveAll(ctx, "", true)
	wantCode(t, err, kverr.UnavailableInCurrentStatus)
}
