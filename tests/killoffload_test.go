package tests

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/ssd"
)

// Durability of a box killed while its offloads are in flight (session 9):
// a master and two appliances, each its own process with its own SSD
// directory, offload "immediate", DRAM far smaller than what is put, so
// DRAM sits at its high watermark, eviction runs and offloads (and their
// group commits) are in flight when box-a is killed with SIGKILL and
// started again on the same SSD directory. Keys are removed before the
// kill, while box-a is dead and while it re-registers.
//
// What must hold, from what the master listed just before the kill:
//   - (a) a key with an acknowledged (COMPLETE) LOCAL_DISK replica
//     anywhere, or a MEMORY replica on the surviving box-b, is read back
//     with its bytes once box-a re-registered (polled, bounded);
//   - (b) a key that is gone had all its copies in box-a's DRAM;
//   - (c) a removed key never comes back: not after the restart, not after
//     a second restart;
//   - (d) box-a's SSD and the master agree once offloads are over: every
//     LOCAL_DISK replica the master lists on box-a is in box-a's SSD at
//     that place with the right bytes, and box-a's SSD holds no copy the
//     master does not list (a group commit written but never reported is
//     adopted by the re-registration or removed, never half-present).

const (
	koValue = 64 << 10
	koKeys  = 2400
	koKill  = 1600 // the writer's position at the kill
)

func koKey(i int) string       { return fmt.Sprintf("ko/%05d", i) }
func koBytes(i int) []byte     { return randomBytes(uint64(i)+4242, koValue) }
func koIndex(key string) int   { var i int; fmt.Sscanf(key, "ko/%05d", &i); return i }
func koTwo(i int) bool         { return i%3 == 0 }
func koRemoveEarly(i int) bool { return i%11 == 5 }

// koReplica is one replica as the master listed it.
type koReplica struct {
	typ            kvtierpb.ReplicaType
	state          kvtierpb.ReplicaState
	node           string
	bucket, offset uint64
	unavailable    bool
}

// koList lists every object with its replicas.
func koList(t *testing.T, cl *client.Client) map[string][]koReplica {
	t.Helper()
	out := map[string][]koReplica{}
	var cursor []byte
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		page, err := cl.Master().ListObjects(ctx, &kvtierpb.ListObjectsRequest{Prefix: []byte("ko/"), Cursor: cursor, Limit: 10000})
		cancel()
		if err != nil {
			t.Fatalf("list: %v", kverr.FromGRPC(err))
		}
		for _, o := range page.Objects {
			var rs []koReplica
			for _, r := range o.Replicas {
				rs = append(rs, koReplica{r.Type, r.State, r.Node, r.Bucket, r.Offset, r.Unavailable})
			}
			out[string(o.Key)] = rs
		}
		if len(page.NextCursor) == 0 {
			return out
		}
		cursor = page.NextCursor
	}
}

// koWarnings are the WARN and ERROR lines of p's log.
func koWarnings(p *proc) string {
	var out []string
	for _, l := range strings.Split(p.output(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	if len(out) > 40 {
		out = append(out[:40], fmt.Sprintf("... %d more", len(out)-40))
	}
	return strings.Join(out, "\n")
}

// koDiskOnly reports whether every listed replica is on an SSD.
func koDiskOnly(rs []koReplica) bool {
	for _, r := range rs {
		if r.typ != kvtierpb.ReplicaType_LOCAL_DISK {
			return false
		}
	}
	return len(rs) > 0
}

// koBucketsDropped is the master's count of SSD buckets appliances evicted.
func koBucketsDropped(t *testing.T, cl *client.Client) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cl.Master().Stats(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatalf("stats: %v", kverr.FromGRPC(err))
	}
	return st.Counters["disk_buckets_dropped"]
}

// koState is node's state as the master lists it.
func koState(t *testing.T, cl *client.Client, node string) kvtierpb.ClientState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Master().ListClients(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatalf("list clients: %v", kverr.FromGRPC(err))
	}
	for _, ci := range resp.Clients {
		if ci.ClientId == node {
			return ci.State
		}
	}
	return kvtierpb.ClientState(0)
}

// koSet is a set of keys shared by goroutines.
type koSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (s *koSet) add(k string) { s.mu.Lock(); s.m[k] = true; s.mu.Unlock() }
func (s *koSet) has(k string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}
func (s *koSet) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestKillApplianceWithOffloadsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process kill test (about 20 s); run without -short")
	}
	// Grace long enough that box-a is suspect, never gone, while it is
	// down: its restart is then the restart of a known box.
	c := startCluster(t, "--offload", "immediate", "--client-grace", "30s")
	dirA, dirB := t.TempDir(), t.TempDir()
	boxArgs := func(dir string) []string {
		return []string{"--dram", "32MiB", "--ssd-dir", dir, "--ssd-capacity", "2GiB"}
	}
	a := c.appliance("box-a", boxArgs(dirA)...)
	b := c.appliance("box-b", boxArgs(dirB)...)
	cl := c.client(t)
	ctx := context.Background()

	removed := &koSet{m: map[string]bool{}} // Remove answered success
	remove := func(key string) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := cl.Remove(rctx, key, true)
		if err == nil {
			removed.add(key)
			return
		}
		// Refused (in flight, being offloaded), or removed from the master
		// with an appliance's confirmation still missing (the removal stays
		// queued for it): removed all the same when the master no longer
		// has it.
		if _, serr := cl.Stat(ctx, key); kverr.Is(serr, kverr.ObjectNotFound) {
			removed.add(key)
		}
	}

	// The writer: puts every key (a third of them with two replicas),
	// retrying "no room" briefly as a client would, and removes some keys
	// a little after their put. killAt is closed when it reaches koKill.
	killAt := make(chan struct{})
	writerDone := make(chan struct{})
	var putErrs int
	go func() {
		defer close(writerDone)
		for i := range koKeys {
			if i == koKill {
				close(killAt)
			}
			var opts []client.PutOption
			if koTwo(i) {
				opts = append(opts, client.WithReplicas(2))
			}
			deadline := time.Now().Add(3 * time.Second)
			for {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := cl.Put(pctx, koKey(i), koBytes(i), opts...)
				cancel()
				if err == nil || !kverr.Is(err, kverr.NoAvailableHandle) || time.Now().After(deadline) {
					if err != nil {
						putErrs++
					}
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if j := i - 8; j >= 0 && koRemoveEarly(j) {
				remove(koKey(j))
			}
		}
	}()

	<-killAt
	before := koList(t, cl) // what the master acknowledged just before the kill
	a.kill()                // SIGKILL: offloads and group commits in flight die with it
	t.Logf("killed box-a with %d objects listed", len(before))

	// Removed while box-a is dead: keys it holds copies of (each waits
	// for box-a's confirmation, at most the master's 5 s).
	var dead []string
	for key, rs := range before {
		for _, r := range rs {
			if r.node == "box-a" && !removed.has(key) && len(dead) < 20 {
				dead = append(dead, key)
				break
			}
		}
	}
	var wg sync.WaitGroup
	for _, key := range dead {
		wg.Go(func() { remove(key) })
	}
	wg.Wait()

	// Start box-a again (same name, same SSD directory) and race its
	// re-registration: once the master has seen the new process (box-a
	// LIVE again after its silence) box-a is frozen (SIGSTOP) for a moment,
	// and keys it holds copies of that also live on box-b are removed; then
	// it goes on and re-registers what its SSD recovered.
	eventually(t, 10*time.Second, "the master notices box-a's silence", func() bool { return koState(t, cl, "box-a") != kvtierpb.ClientState_LIVE })
	var racing []string
	for key, rs := range before {
		onA, onB := false, false
		for _, r := range rs {
			onA = onA || r.node == "box-a" && r.typ == kvtierpb.ReplicaType_LOCAL_DISK && r.state == kvtierpb.ReplicaState_COMPLETE
			onB = onB || r.node == "box-b" && r.state == kvtierpb.ReplicaState_COMPLETE
		}
		if onA && onB && !removed.has(key) && len(racing) < 24 {
			racing = append(racing, key)
		}
	}
	// Keys whose only copy was box-a's SSD: while box-a re-registers they
	// may not be served yet (a get is told to retry), but the master keeps
	// them (the symptom seen once: a get 4 s after the restart answered
	// "no such object").
	var ssdOnly []string
	for key, rs := range before {
		only := len(rs) > 0
		for _, r := range rs {
			only = only && r.node == "box-a" && r.typ == kvtierpb.ReplicaType_LOCAL_DISK && r.state == kvtierpb.ReplicaState_COMPLETE
		}
		if only && !removed.has(key) && len(ssdOnly) < 10 {
			ssdOnly = append(ssdOnly, key)
		}
	}
	a, ready := launch(t, "box-a", append([]string{"appliance", "--master", c.grpc, "--name", "box-a", "--hugepages", "auto",
		"--data-addr", "127.0.0.1:0"}, boxArgs(dirA)...)...)
	for koState(t, cl, "box-a") != kvtierpb.ClientState_LIVE {
		select {
		case <-a.exited:
			t.Fatalf("box-a exited at its restart:\n%s", a.output())
		case <-time.After(time.Millisecond):
		}
	}
	_ = a.cmd.Process.Signal(syscall.SIGSTOP)
	for _, key := range racing {
		wg.Go(func() { remove(key) })
	}
	for _, key := range ssdOnly {
		if _, err := cl.Stat(ctx, key); err != nil {
			t.Errorf("%s, acknowledged on box-a's SSD, is dropped while box-a re-registers: %v", key, err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the removals reach the master while box-a is frozen
	_ = a.cmd.Process.Signal(syscall.SIGCONT)
	wg.Wait()
	select {
	case <-ready:
	case <-a.exited:
		t.Fatalf("box-a exited at its restart:\n%s", a.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("box-a did not come back within 60 s:\n%s", a.output())
	}
	t.Logf("%d removals raced box-a's re-registration, %d SSD-only keys read during it", len(racing), len(ssdOnly))
	<-writerDone
	t.Logf("writer done (%d puts failed), %d keys removed", putErrs, len(removed.keys()))

	// (a): acknowledged on SSD, or in the surviving box's DRAM: readable
	// with the same bytes once box-a is back.
	var must []string
	for key, rs := range before {
		if removed.has(key) {
			continue
		}
		for _, r := range rs {
			if r.state == kvtierpb.ReplicaState_COMPLETE &&
				(r.typ == kvtierpb.ReplicaType_LOCAL_DISK || r.typ == kvtierpb.ReplicaType_MEMORY && r.node == "box-b") {
				must = append(must, key)
				break
			}
		}
	}
	sort.Strings(must)
	deadline := time.Now().Add(20 * time.Second)
	for _, key := range must {
		for {
			gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			got, err := cl.Get(gctx, key)
			cancel()
			if err == nil {
				if !bytes.Equal(got, koBytes(koIndex(key))) {
					t.Fatalf("%s: wrong bytes after the restart", key)
				}
				break
			}
			if time.Now().After(deadline) && kverr.Is(err, kverr.ObjectNotFound) && koDiskOnly(before[key]) && koBucketsDropped(t, cl) > 0 {
				// An SSD bucket was evicted: the host's file system ran
				// short of space (other work on the machine), and the
				// oldest bucket goes first. What a cache does.
				t.Logf("(a) %s, only on SSD before the kill, is gone: %d SSD buckets were evicted meanwhile", key, koBucketsDropped(t, cl))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("(a) %s (listed before the kill: %+v) not readable 20 s after box-a's restart: %v\nbox-a's warnings:\n%s\nbox-b's warnings:\n%s\nmaster:\n%s",
					key, before[key], err, koWarnings(a), koWarnings(b), koWarnings(c.master))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("(a) %d acknowledged keys read back", len(must))

	// Settled: box-a has re-registered (no replica left unconfirmed).
	eventually(t, 20*time.Second, "box-a's re-registration ends (no unavailable replica)", func() bool {
		for _, rs := range koList(t, cl) {
			for _, r := range rs {
				if r.unavailable {
					return false
				}
			}
		}
		return true
	})

	// (b): what is gone had all its copies in box-a's DRAM.
	after := koList(t, cl)
	lost := 0
	for key, rs := range before {
		if removed.has(key) {
			continue
		}
		if _, ok := after[key]; ok {
			continue
		}
		lost++
		if koDiskOnly(rs) && koBucketsDropped(t, cl) > 0 {
			continue // an evicted SSD bucket (see (a))
		}
		for _, r := range rs {
			if r.state == kvtierpb.ReplicaState_COMPLETE && !(r.typ == kvtierpb.ReplicaType_MEMORY && r.node == "box-a") {
				t.Errorf("(b) %s is gone, yet before the kill it had %+v", key, rs)
			}
		}
	}
	t.Logf("(b) %d keys lost, all of them held only in box-a's DRAM or in an evicted SSD bucket (%d evicted)", lost, koBucketsDropped(t, cl))
	// Copies in the old process's buckets that the listing before the kill
	// did not show: reported between the listing and the kill, or written
	// and never reported (a group commit in flight), then adopted by the
	// re-registration. Logged, to show the case is exercised; (d) checks
	// them like every copy.
	var lastBucket uint64
	for _, rs := range before {
		for _, r := range rs {
			if r.node == "box-a" && r.typ == kvtierpb.ReplicaType_LOCAL_DISK {
				lastBucket = max(lastBucket, r.bucket)
			}
		}
	}
	adopted := 0
	for key, rs := range after {
		for _, r := range rs {
			if r.node != "box-a" || r.typ != kvtierpb.ReplicaType_LOCAL_DISK || r.bucket > lastBucket {
				continue
			}
			known := false
			for _, q := range before[key] {
				known = known || q.node == "box-a" && q.typ == kvtierpb.ReplicaType_LOCAL_DISK
			}
			if !known {
				adopted++
			}
		}
	}
	t.Logf("%d copies in box-a's old buckets not listed before the kill are served after it", adopted)

	// (c): removed keys stay removed.
	checkRemoved := func(when string) {
		t.Helper()
		now := koList(t, cl)
		for _, key := range removed.keys() {
			if _, ok := now[key]; ok {
				t.Errorf("(c) %s: removed key %s is listed again", when, key)
			}
			if ok, err := cl.Exist(ctx, key); err != nil || ok {
				t.Errorf("(c) %s: removed key %s: exist %v, %v", when, key, ok, err)
			}
		}
	}
	checkRemoved("after box-a's restart")

	// (d): once offloads are over, box-a's SSD and the master agree.
	// Offloads over: both boxes report empty offload queues, and the
	// listing no longer changes across a heartbeat period. (An object
	// whose offload the restart voided keeps its DRAM copy only, until
	// eviction offers it again: not every object has a disk copy.)
	prev := ""
	eventually(t, 20*time.Second, "offloads over (empty queues, listing stable)", func() bool {
		idle := true
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cl.Master().ListClients(lctx, &kvtierpb.Empty{})
		cancel()
		if err != nil {
			return false
		}
		for _, ci := range resp.Clients {
			if d := ci.GetDisk(); d != nil && d.GetOffloadQueue() > 0 {
				idle = false
			}
		}
		cur := fmt.Sprint(koList(t, cl))
		stable := cur == prev
		prev = cur
		if !stable || !idle {
			time.Sleep(1200 * time.Millisecond) // one heartbeat period apart
			return false
		}
		return true
	})
	final := koList(t, cl)
	droppedAtFinal := koBucketsDropped(t, cl)
	a.stop(t) // SIGTERM: a clean exit releases its SSD directory
	tier, err := ssd.Open(ctx, ssd.Config{Dir: dirA, Capacity: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	onA := map[string]ssd.Entry{}
	for _, e := range tier.Objects() {
		onA[e.Key] = e
	}
	listedOnA := 0
	for key, rs := range final {
		for _, r := range rs {
			if r.typ != kvtierpb.ReplicaType_LOCAL_DISK || r.node != "box-a" {
				continue
			}
			listedOnA++
			e, ok := onA[key]
			if !ok && koBucketsDropped(t, cl) > droppedAtFinal {
				continue // evicted since the listing (see (a))
			}
			if !ok || e.Loc.Bucket != r.bucket || e.Loc.Offset != r.offset {
				t.Errorf("(d) the master lists %s on box-a's SSD at bucket %d offset %d; the SSD has %+v (%v)", key, r.bucket, r.offset, e.Loc, ok)
				continue
			}
			buf := make([]byte, e.Size)
			if err := tier.ReadExtent(ctx, e.Loc.Bucket, e.Loc.Offset, buf); err != nil || !bytes.Equal(buf, koBytes(koIndex(key))) {
				t.Errorf("(d) %s on box-a's SSD: %v (bytes equal: %v)", key, err, bytes.Equal(buf, koBytes(koIndex(key))))
			}
		}
	}
	orphans := 0
	for key, e := range onA {
		listed := false
		for _, r := range final[key] {
			listed = listed || r.typ == kvtierpb.ReplicaType_LOCAL_DISK && r.node == "box-a" && r.bucket == e.Loc.Bucket && r.offset == e.Loc.Offset
		}
		switch {
		case listed:
		case removed.has(key):
			// Its removal may still wait in box-a's queue at the master
			// (one queued without waiting, during the registration): it
			// is applied before the next registration, checked below.
		default:
			orphans++
			t.Errorf("(d) box-a's SSD holds %s (bucket %d offset %d), which the master does not list there: %+v", key, e.Loc.Bucket, e.Loc.Offset, final[key])
		}
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("(d) %d copies listed on box-a, %d on its SSD, %d orphans", listedOnA, len(onA), orphans)

	// A second start of box-a (a clean one this time) brings back no
	// removed key either.
	a = c.appliance("box-a", boxArgs(dirA)...)
	why := ""
	served := func() bool {
		for key, rs := range koList(t, cl) {
			for _, r := range rs {
				if r.unavailable {
					why = fmt.Sprintf("%s: replica %+v unavailable", key, r)
					return false
				}
			}
		}
		for key, rs := range final {
			for _, r := range rs {
				if r.node == "box-a" && r.typ == kvtierpb.ReplicaType_LOCAL_DISK {
					if _, err := cl.Stat(ctx, key); err != nil && !(koDiskOnly(rs) && koBucketsDropped(t, cl) > droppedAtFinal) {
						why = fmt.Sprintf("%s: %v", key, err)
						return false
					}
				}
			}
		}
		return true
	}
	for deadline := time.Now().Add(20 * time.Second); !served(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("box-a's copies not served again 20 s after its second start: %s\nbox-a:\n%s", why, a.output())
		}
	}
	checkRemoved("after box-a's second start")
}
