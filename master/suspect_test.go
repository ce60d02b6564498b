package master

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// beat sends one heartbeat of id with a 1 s period.
func beat(t *testing.T, m *Master, id string, mod func(*HeartbeatRequest)) {
	t.Helper()
	req := HeartbeatRequest{Client: id, Endpoint: id + ":1", Interval: time.Second}
	if mod != nil {
		mod(&req)
	}
	if _, err := m.Heartbeat(ctx, req); err != nil {
		t.Fatal(err)
	}
}

func clientInfo(t *testing.T, m *Master, id string) ClientInfo {
	t.Helper()
	for _, c := range m.ListClients(ctx) {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("client %s not listed", id)
	return ClientInfo{}
}

// drain returns the events published so far.
func drain(sub *Subscription) []Event {
	var out []Event
	for {
		select {
		case ev := <-sub.C():
			out = append(out, ev)
		default:
			return out
		}
	}
}

// A client that reports a 1 s beat is suspect after 2.5 s of silence (not
// the 10 s ClientTTL): its replicas are no longer handed out, Exist says
// no for objects only it holds, an event names it, and a beat brings it
// (and every object) back.
func TestSuspectAfterTwoAndAHalfBeats(t *testing.T) {
	m, fc := newTest(t, Config{})
	sub := m.Subscribe(64)
	defer sub.Close()
	beat(t, m, "A", nil)
	beat(t, m, "B", nil)
	mountMem(t, m, "A", "A/0", 1<<20)
	mountMem(t, m, "B", "B/0", 1<<20)
	putCfg(t, m, "w", "both", 100, PutConfig{Replicas: 2})
	putCfg(t, m, "w", "onlyA", 100, PutConfig{Replicas: 1, PreferredSegment: "A/0"})

	fc.Advance(2 * time.Second)
	beat(t, m, "B", nil)
	m.Reap(ctx)
	if c := clientInfo(t, m, "A"); c.State != ClientLive || len(c.Problems) != 0 {
		t.Fatalf("2 s of silence with a 1 s beat is not yet suspect: %+v", c)
	}
	fc.Advance(600 * time.Millisecond)
	beat(t, m, "B", nil)
	drain(sub)
	m.Reap(ctx)
	c := clientInfo(t, m, "A")
	if c.State != ClientGrace || len(c.Problems) != 1 || !strings.Contains(c.Problems[0], "suspect") || !c.Storage {
		t.Fatalf("after 2.6 s: %+v", c)
	}
	evs := drain(sub)
	if len(evs) != 1 || evs[0].Node != "A" || !strings.Contains(evs[0].Message, "suspect") {
		t.Fatalf("events %+v", evs)
	}
	l, err := m.GetReplicaList(ctx, "r", "", "both")
	if err != nil || len(l.Replicas) != 1 || l.Replicas[0].Node != "B" {
		t.Fatalf("read of a two-replica object: %+v %v", l.Replicas, err)
	}
	if exists(t, m, "onlyA") {
		t.Fatal("exists while only a suspect node holds it")
	}
	if i, err := m.GetObject(ctx, "", "both"); err != nil || len(i.Replicas) != 2 ||
		i.Replicas[0].Unavailable == i.Replicas[1].Unavailable || i.Replicas[0].Unavailable != (i.Replicas[0].Node == "A") {
		t.Fatalf("stat must show which replica is unavailable: %+v %v", i.Replicas, err)
	}
	if ok, _ := m.BatchExist(ctx, "", []string{"both", "onlyA"}); !ok[0] || ok[1] {
		t.Fatalf("batch exist %v", ok)
	}
	_, err = m.GetReplicaList(ctx, "r", "", "onlyA")
	wantCode(t, err, kverr.ObjectNotFound)
	if !strings.Contains(err.Error(), "A") || !strings.Contains(err.Error(), "suspect") {
		t.Fatalf("miss does not name the node: %v", err)
	}
	// Back: everything is served again.
	beat(t, m, "A", nil)
	if c := clientInfo(t, m, "A"); c.State != ClientLive || len(c.Problems) != 0 {
		t.Fatalf("after a beat: %+v", c)
	}
	if !exists(t, m, "onlyA") {
		t.Fatal("object lost across a suspect period")
	}
	if l, _ := m.GetReplicaList(ctx, "r", "", "both"); len(l.Replicas) != 2 {
		t.Fatalf("replicas after recovery %+v", l.Replicas)
	}
	// Silent for good: the gone event says what was lost with it.
	drain(sub)
	fc.Advance(DefaultClientTTL + DefaultClientGrace + time.Second)
	beat(t, m, "B", nil)
	m.Reap(ctx)
	var gone []Event
	for _, ev := range drain(sub) {
		if ev.Kind == "client" && ev.Node == "A" {
			gone = append(gone, ev)
		}
	}
	if len(gone) == 0 || !strings.Contains(gone[len(gone)-1].Message, "gone") || !strings.Contains(gone[len(gone)-1].Message, "1 objects had no other replica") {
		t.Fatalf("events of A going: %+v", gone)
	}
}

// A client that reports no beat period keeps the ClientTTL rule.
func TestSuspectWithoutIntervalUsesTTL(t *testing.T) {
	m, fc := newTest(t, Config{})
	beat(t, m, "A", func(r *HeartbeatRequest) { r.Interval = 0 })
	fc.Advance(5 * time.Second)
	m.Reap(ctx)
	if c := clientInfo(t, m, "A"); c.State != ClientLive {
		t.Fatalf("%+v", c)
	}
	fc.Advance(DefaultClientTTL)
	m.Reap(ctx)
	if c := clientInfo(t, m, "A"); c.State != ClientGrace {
		t.Fatalf("%+v", c)
	}
}

// A leaving beat makes the node suspect at once; its next ordinary beat
// (a restart) brings it back.
func TestLeavingBeat(t *testing.T) {
	m, _ := newTest(t, Config{})
	sub := m.Subscribe(64)
	defer sub.Close()
	beat(t, m, "A", nil)
	mountMem(t, m, "A", "A/0", 1<<20)
	putCfg(t, m, "w", "k", 100, PutConfig{Replicas: 1})
	drain(sub)
	beat(t, m, "A", func(r *HeartbeatRequest) { r.Leaving = true })
	c := clientInfo(t, m, "A")
	if c.State != ClientGrace || len(c.Problems) != 1 || !strings.Contains(c.Problems[0], "left") {
		t.Fatalf("after leaving: %+v", c)
	}
	if segState(m, "A/0") != SegGrace || exists(t, m, "k") {
		t.Fatal("a leaving node's segment still serves")
	}
	if evs := drain(sub); len(evs) != 1 || !strings.Contains(evs[0].Message, "left") {
		t.Fatalf("events %+v", evs)
	}
	beat(t, m, "A", nil)
	if c := clientInfo(t, m, "A"); c.State != ClientLive || !exists(t, m, "k") {
		t.Fatalf("after return: %+v", c)
	}
}

// What a node reports broken is listed and evented once per change; bad
// reports are refused and change nothing.
func TestUnhealthyReports(t *testing.T) {
	m, _ := newTest(t, Config{})
	sub := m.Subscribe(64)
	defer sub.Close()
	beat(t, m, "A", nil)
	drain(sub)
	down := func(r *HeartbeatRequest) { r.Unhealthy = []string{"data listener 127.0.0.1:1 stopped"} }
	beat(t, m, "A", down)
	beat(t, m, "A", down)
	if c := clientInfo(t, m, "A"); len(c.Problems) != 1 || !strings.Contains(c.Problems[0], "listener") {
		t.Fatalf("%+v", c)
	}
	beat(t, m, "A", nil)
	evs := drain(sub)
	if len(evs) != 2 || !strings.Contains(evs[0].Message, "unhealthy") || !strings.Contains(evs[1].Message, "healthy again") {
		t.Fatalf("events %+v", evs)
	}
	_, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Unhealthy: make([]string, maxUnhealthy+1)})
	wantCode(t, err, kverr.InvalidParams)
	_, err = m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Unhealthy: []string{strings.Repeat("x", maxReasonLen+1)}})
	wantCode(t, err, kverr.InvalidParams)
	_, err = m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Interval: -1})
	wantCode(t, err, kverr.InvalidParams)
	if c := clientInfo(t, m, "A"); len(c.Problems) != 0 {
		t.Fatalf("a refused beat changed the client: %+v", c)
	}
}

// An object whose offload failed is evicted without a disk copy instead of
// being offered again forever (a full disk must not wedge DRAM); a skipped
// task (Retry) keeps waiting. Failure events are rate-limited per node.
func TestOffloadFailureMakesEvictable(t *testing.T) {
	m, fc := newTest(t, Config{EvictionRatio: 0.5}) // a pass wants 5 of the 10 objects
	sub := m.Subscribe(256)
	defer sub.Close()
	appliance(t, m, 0)
	fill(t, m, 10, nil)
	r := appliance(t, m, 10)
	if len(r.Offload) != 10 {
		t.Fatalf("tasks %d", len(r.Offload))
	}
	drain(sub)
	for i, task := range r.Offload {
		res := OffloadResult{Client: "A", Key: task.Key, Error: "NO_AVAILABLE_HANDLE: ssd: disk full"}
		res.Retry = i == 0 // the first one was only skipped
		if err := m.OffloadDone(ctx, res); err != nil {
			t.Fatal(err)
		}
	}
	var fails []Event
	for _, ev := range drain(sub) {
		if ev.Kind == "offload" {
			fails = append(fails, ev)
		}
	}
	if len(fails) != 1 || !strings.Contains(fails[0].Message, "disk full") {
		t.Fatalf("failure events not rate-limited or without cause: %+v", fails)
	}
	fc.Advance(time.Second)
	rep := m.EvictNow(ctx)
	if rep.FreedObjects == 0 {
		t.Fatalf("objects whose offload failed stay in DRAM: %+v", rep)
	}
	skipped := r.Offload[0].Key
	if !exists(t, m, skipped) {
		t.Fatal("a skipped offload was evicted without a disk copy")
	}
	// Two seconds later, the next failure gets an event that counts the
	// eight left out before.
	fc.Advance(2 * time.Second)
	putCfg(t, m, "w", "late", 64, PutConfig{Replicas: 1})
	r = appliance(t, m, 10)
	if len(r.Offload) == 0 {
		t.Fatal("no task for a new put")
	}
	for _, task := range r.Offload {
		if err := m.OffloadDone(ctx, OffloadResult{Client: "A", Key: task.Key, Error: "disk full"}); err != nil {
			t.Fatal(err)
		}
	}
	fails = fails[:0]
	for _, ev := range drain(sub) {
		if ev.Kind == "offload" {
			fails = append(fails, ev)
		}
	}
	if len(fails) != 1 || !strings.Contains(fails[0].Message, "8 more failures") {
		t.Fatalf("second failure event: %+v", fails)
	}
}

// FuzzLiveness drives random beats, goodbyes, silences and puts of two
// storage nodes and checks after every step the rule that makes failure
// visible: a replica handed out is on a LIVE node, and Exist says yes
// exactly when GetReplicaList hands out a replica ("exists" implies "get
// succeeds"). A node that beats again serves every object it held.
func FuzzLiveness(f *testing.F) {
	f.Add([]byte{0, 1, 4, 5, 3, 3, 3, 3, 3, 3, 6, 0, 6})
	f.Add([]byte{0, 1, 4, 4, 2, 6, 0, 6, 3, 3, 3, 3, 3, 3, 3, 3, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			data = data[:300]
		}
		m, fc := newTest(t, Config{})
		nodes := []string{"A", "B"}
		for _, n := range nodes {
			beat(t, m, n, nil)
			mountMem(t, m, n, n+"/0", 1<<20)
		}
		var keys []string
		goneEver := false // silent past TTL+grace: its objects are dropped by design
		for i, op := range data {
			switch op % 7 {
			case 0, 1: // a node beats
				beat(t, m, nodes[op%2], nil)
			case 2: // a node says goodbye
				beat(t, m, nodes[(op/7)%2], func(r *HeartbeatRequest) { r.Leaving = true })
			case 3: // time passes
				fc.Advance(500 * time.Millisecond)
				m.Reap(ctx)
			case 4, 5: // a put, one or two replicas
				k := fmt.Sprintf("k%d", i)
				if _, err := m.PutStart(ctx, PutRequest{Client: "w", Key: k, Size: 64, Config: PutConfig{Replicas: int(op%7) - 3}}); err != nil {
					continue // nothing allocatable: every node suspect
				}
				if err := m.PutEnd(ctx, "w", "", k); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			case 6: // every node beats: everything is served again
				for _, n := range nodes {
					beat(t, m, n, nil)
				}
				for _, k := range keys {
					if !goneEver && !exists(t, m, k) {
						t.Fatalf("step %d: %s lost although every node is back and none was ever GONE", i, k)
					}
				}
			}
			live := map[string]bool{}
			for _, c := range m.ListClients(ctx) {
				live[c.ID] = c.State == ClientLive
				goneEver = goneEver || c.State == ClientGone
			}
			for _, k := range keys {
				ok := exists(t, m, k)
				l, err := m.GetReplicaList(ctx, "r", "", k)
				if ok != (err == nil) {
					t.Fatalf("step %d: %s exists=%v but GetReplicaList: %v", i, k, ok, err)
				}
				if err != nil && !kverr.Is(err, kverr.ObjectNotFound) {
					t.Fatalf("step %d: %s: %v", i, k, err)
				}
				for _, r := range l.Replicas {
					if !live[r.Node] {
						t.Fatalf("step %d: %s handed out a replica on %s, which is not LIVE", i, k, r.Node)
					}
				}
			}
		}
	})
}

// A pure caller's goodbye removes its row without an event and revokes its
// puts still in flight; a storage node's goodbye keeps it listed (left).
func TestCallerGoodbyeLeavesNoRow(t *testing.T) {
	m, _ := newTest(t, Config{})
	sub := m.Subscribe(64)
	defer sub.Close()
	beat(t, m, "A", nil)
	mountMem(t, m, "A", "A/0", 1<<20)
	beat(t, m, "gpu", nil)
	if _, err := m.PutStart(ctx, PutRequest{Client: "gpu", Key: "half", Size: 64, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
	drain(sub)
	beat(t, m, "gpu", func(r *HeartbeatRequest) { r.Leaving = true })
	cl := m.ListClients(ctx)
	if len(cl) != 1 || cl[0].ID != "A" {
		t.Fatalf("clients after a caller's goodbye: %+v", cl)
	}
	if evs := drain(sub); len(evs) != 0 {
		t.Fatalf("events for a caller's goodbye: %+v", evs)
	}
	if _, err := m.GetObject(ctx, "", "half"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("the caller's put in flight: %v", err)
	}
	// Coming back is a fresh registration.
	beat(t, m, "gpu", nil)
	if len(m.ListClients(ctx)) != 2 {
		t.Fatal("a returning caller is not listed")
	}
}
