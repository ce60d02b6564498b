package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/internal/fastrpc"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// inproc is a master and appliances in this test process: the same code as
// the real binary, with access to segment memory for faults no process
// boundary lets us cause (a flipped bit in DRAM).
type inproc struct {
	m    *master.Master
	addr string
}

func startInproc(t testing.TB, cfg master.Config) *inproc {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, stop := runMaster(t, cfg, lis)
	t.Cleanup(stop)
	return &inproc{m: m, addr: lis.Addr().String()}
}

// runMaster runs a new master with cfg on lis until stop.
func runMaster(t testing.TB, cfg master.Config, lis net.Listener) (*master.Master, func()) {
	t.Helper()
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	stopServing := serveMaster(m, lis)
	return m, sync.OnceFunc(func() { stopServing(); cancel(); <-done })
}

// serveMaster serves m on lis as `kvtier master` does: gRPC, with the fast
// path for unary calls on the same listener.
func serveMaster(m *master.Master, lis net.Listener) (stop func()) {
	ms := master.NewGRPCServer(m)
	s := grpc.NewServer()
	kvtierpb.RegisterMasterServer(s, ms)
	fast := fastrpc.NewServer(&kvtierpb.Master_ServiceDesc, ms, nil)
	glis := fast.Split(lis)
	go func() { _ = s.Serve(glis) }()
	return func() { s.Stop(); _ = fast.Close() }
}

func (ip *inproc) appliance(t testing.TB, cfg appliance.Config) *appliance.Appliance {
	t.Helper()
	cfg.MasterAddr = ip.addr
	if cfg.DRAM == 0 {
		cfg.DRAM = 32 << 20
	}
	cfg.Hugepages = dram.HugepageOff
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 100 * time.Millisecond
	}
	a, err := appliance.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

func (ip *inproc) client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.Config{MasterAddr: ip.addr, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// corrupt flips one byte of key's replica on appliance a.
func corrupt(t *testing.T, c *client.Client, a *appliance.Appliance, key string) {
	t.Helper()
	info, err := c.Stat(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range info.Replicas {
		if r.Node == a.Name() && r.Type == kvtierpb.ReplicaType_MEMORY {
			// Segment memory is the region split by segment size; the
			// appliance here has one segment, so offsets are region offsets.
			a.Region().Bytes()[r.Offset] ^= 0xff
			return
		}
	}
	t.Fatalf("no MEMORY replica of %s on %s", key, a.Name())
}

// TestChecksumMismatchIsAMissNeverWrongBytes: a corrupted only replica gives
// CHECKSUM_MISMATCH; with a second good replica the read falls back to it.
func TestChecksumMismatchIsAMissNeverWrongBytes(t *testing.T) {
	ip := startInproc(t, master.Config{})
	a1 := ip.appliance(t, appliance.Config{Name: "a1"})
	a2 := ip.appliance(t, appliance.Config{Name: "a2"})
	c := ip.client(t)
	ctx := context.Background()
	val := bytes.Repeat([]byte("kv-cache-block "), 1000)

	if err := c.Put(ctx, "single", val, client.WithPreferredSegment("a1/mem0")); err != nil {
		t.Fatal(err)
	}
	corrupt(t, c, a1, "single")
	if got, err := c.Get(ctx, "single"); !kverr.Is(err, kverr.ChecksumMismatch) || got != nil {
		t.Fatalf("corrupted single replica: got %d bytes, err %v; want CHECKSUM_MISMATCH and no bytes", len(got), err)
	}

	if err := c.Put(ctx, "double", val, client.WithReplicas(2)); err != nil {
		t.Fatal(err)
	}
	corrupt(t, c, a2, "double")
	for range 4 { // whichever replica is tried first, the answer is the good bytes
		got, err := c.Get(ctx, "double")
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("fallback to the good replica: err %v", err)
		}
	}
}

// TestLeaseExpiredDuringTransfer: with a 1 ms lease a 32 MiB read outlives its
// lease and is failed with LEASE_EXPIRED rather than returned.
func TestLeaseExpiredDuringTransfer(t *testing.T) {
	ip := startInproc(t, master.Config{LeaseTTL: time.Millisecond})
	ip.appliance(t, appliance.Config{Name: "box", DRAM: 64 << 20})
	c := ip.client(t)
	ctx := context.Background()
	if err := c.Put(ctx, "big", make([]byte, 32<<20)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Get(ctx, "big")
	if !kverr.Is(err, kverr.LeaseExpired) {
		t.Fatalf("get with a 1ms lease: %v, want LEASE_EXPIRED", err)
	}
}

// TestSameProcessReadIsLocal: a client that mounts its own memory and puts
// there reads it back through the same-process path.
func TestSameProcessReadIsLocal(t *testing.T) {
	ip := startInproc(t, master.Config{})
	c, err := client.New(context.Background(), client.Config{MasterAddr: ip.addr, GlobalSegmentSize: 16 << 20, Hugepages: dram.HugepageOff})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	val := bytes.Repeat([]byte{7}, 1<<20)
	if err := c.Put(ctx, "mine", val); err != nil {
		t.Fatal(err)
	}
	before := c.Engine().Stats()
	got, err := c.Get(ctx, "mine")
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get: %v", err)
	}
	after := c.Engine().Stats()
	if after.LocalBytes-before.LocalBytes < uint64(len(val)) {
		t.Fatalf("same-process read did not use the local path: stats before %+v after %+v", before, after)
	}
}

// TestFastPathAndGRPCOnlyClientsAgree: a default client (master calls over
// the fast path) and a Config.GRPCOnly client see each other's objects and
// get the same errors, against the same master.
func TestFastPathAndGRPCOnlyClientsAgree(t *testing.T) {
	ip := startInproc(t, master.Config{})
	ip.appliance(t, appliance.Config{Name: "box"})
	fast := ip.client(t)
	slow, err := client.New(context.Background(), client.Config{MasterAddr: ip.addr, GRPCOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	ctx := context.Background()
	v1, v2 := randomBytes(1, 300<<10), randomBytes(2, 5000)
	if err := fast.Put(ctx, "via/fast", v1); err != nil {
		t.Fatal(err)
	}
	if err := slow.Put(ctx, "via/grpc", v2); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{fast, slow} {
		for key, want := range map[string][]byte{"via/fast": v1, "via/grpc": v2} {
			got, err := c.Get(ctx, key)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes, %v", key, len(got), err)
			}
		}
		_, err := c.Get(ctx, "via/none")
		if kverr.CodeOf(err) != kverr.ObjectNotFound {
			t.Fatalf("missing key: %v", err)
		}
		if err := c.Remove(ctx, "via/fast", false); kverr.CodeOf(err) != kverr.ObjectHasLease {
			t.Fatalf("remove of a leased object: %v", err)
		}
	}
}

// TestStandaloneBoxAppliesItsOwnCommits: in a standalone (master and
// appliance in one process), a direct put's box takes its own commit
// record from the master's outbox and applies it (appliance
// pullOwnRecords) instead of waking its records stream for it. Every put
// is in the box's DRAM directory when the client has its answer; a
// removal's free still reaches the directory through the stream, which
// skips the records the box applied itself; the bytes read back are the
// ones put.
func TestStandaloneBoxAppliesItsOwnCommits(t *testing.T) {
	ip := startInproc(t, master.Config{})
	a := ip.appliance(t, appliance.Config{Name: "box", PutMaster: master.NewGRPCServer(ip.m),
		DramRecords: func(ctx context.Context) (appliance.DramRecordsStream, error) { return ip.m.OpenDramRecords(ctx), nil }})
	checkBoxAppliesOwnCommits(t, ip, a, a.DramRecordsPulled)
}

// TestRemoteBoxTakesItsCommitsFromTheAnswer: a box whose master is reached
// over its client connection (another process, as in a cluster) asks
// PutStart for the records up to a direct put's commit
// (PutConfig.holder_takes) and applies them from the answer (appliance
// takeRecords) instead of waiting for its records stream to bring them:
// the same guarantees as above, with the records taken that way counted.
func TestRemoteBoxTakesItsCommitsFromTheAnswer(t *testing.T) {
	ip := startInproc(t, master.Config{})
	a := ip.appliance(t, appliance.Config{Name: "box"})
	checkBoxAppliesOwnCommits(t, ip, a, a.DramRecordsTaken)
}

// checkBoxAppliesOwnCommits puts objects direct through a, removes half
// and reads the rest back, checking a's DRAM directory at each step and
// that a applied commit records itself (applied counts them).
func checkBoxAppliesOwnCommits(t *testing.T, ip *inproc, a *appliance.Appliance, applied func() uint64) {
	c, err := client.New(context.Background(), client.Config{MasterAddr: ip.addr, HeartbeatInterval: 100 * time.Millisecond,
		Transfer: transfer.Config{DisableSharedMemory: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const n = 48
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 7}, 20000+i) }
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				if err := c.Put(ctx, fmt.Sprintf("own/%d", i), val(i)); err != nil {
					t.Errorf("put %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if st := c.Engine().Stats(); st.DirectPuts != n {
		t.Fatalf("%d of %d puts went direct", st.DirectPuts, n)
	}
	if got := a.DramDirectoryLen(); got != n {
		t.Fatalf("directory holds %d entries after %d acknowledged puts", got, n)
	}
	if applied() == 0 {
		t.Fatal("the box applied none of its own commit records")
	}
	keys := make([]string, 0, n/2)
	for i := 0; i < n; i += 2 {
		keys = append(keys, fmt.Sprintf("own/%d", i))
	}
	for _, err := range c.BatchRemove(ctx, keys, true) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A removal answers once its frees are acknowledged: applied.
	if got := a.DramDirectoryLen(); got != n/2 {
		t.Fatalf("directory holds %d entries after removing %d of %d", got, n/2, n)
	}
	buf := make([]byte, 64<<10)
	for i := 1; i < n; i += 2 {
		got, err := c.GetInto(ctx, fmt.Sprintf("own/%d", i), buf)
		if err != nil || !bytes.Equal(buf[:got], val(i)) {
			t.Fatalf("get %d: %v, equal %v", i, err, bytes.Equal(buf[:got], val(i)))
		}
	}
	// Puts after the removals (the stream caught up on the frees) are
	// taken by the box again.
	before := applied()
	for i := range 8 {
		if err := c.Put(ctx, fmt.Sprintf("own/again/%d", i), val(i)); err != nil {
			t.Fatal(err)
		}
	}
	if applied() == before || a.DramDirectoryLen() != n/2+8 {
		t.Fatalf("after the removals: applied %d -> %d, directory %d", before, applied(), a.DramDirectoryLen())
	}
}

// TestStagedPutsLandBeforeAnyoneReadsThem: direct puts to a box whose
// master is another process's (here: over its client connection) are
// staged: the box reads the bytes, one PutStart places and commits the
// put, and the commit record copies them in. Readers racing the writers
// (another client, asking for each key while it is being put) get the
// object whole or not yet, never other bytes; a put above the staging
// bound takes the two-call path; two clients putting one key get one
// success each (the second finds it stored); removals and the directory hold as
// for any direct put.
func TestStagedPutsLandBeforeAnyoneReadsThem(t *testing.T) {
	ip := startInproc(t, master.Config{})
	a := ip.appliance(t, appliance.Config{Name: "box"})
	newClient := func(shm bool) *client.Client {
		c, err := client.New(context.Background(), client.Config{MasterAddr: ip.addr, HeartbeatInterval: 100 * time.Millisecond,
			Transfer: transfer.Config{DisableSharedMemory: !shm}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	w, r := newClient(false), newClient(true)
	ctx := context.Background()
	const n = 200
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, 1000+i*37) }
	var next sync.Map // writer goroutine → key it is putting
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var raced, whole int
	wg.Go(func() { // the reader
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			next.Range(func(_, v any) bool {
				i := v.(int)
				got, err := r.GetInto(ctx, fmt.Sprintf("staged/%d", i), buf)
				switch {
				case err == nil && bytes.Equal(buf[:got], val(i)):
					whole++
				case err == nil:
					t.Errorf("read staged/%d while it was put: %d bytes, not the value", i, got)
				case kverr.Is(err, kverr.ObjectNotFound) || kverr.Is(err, kverr.ReplicaIsNotReady):
					raced++
				default:
					t.Errorf("read staged/%d while it was put: %v", i, err)
				}
				return true
			})
		}
	})
	var writers sync.WaitGroup
	for g := range 4 {
		writers.Go(func() {
			for i := g; i < n; i += 4 {
				next.Store(g, i)
				if err := w.Put(ctx, fmt.Sprintf("staged/%d", i), val(i)); err != nil {
					t.Errorf("put %d: %v", i, err)
				}
				// Acknowledged: any client reads it now.
				if got, err := r.Get(ctx, fmt.Sprintf("staged/%d", i)); err != nil || !bytes.Equal(got, val(i)) {
					t.Errorf("read staged/%d after its put: %v, equal %v", i, err, bytes.Equal(got, val(i)))
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	t.Logf("reads racing the puts: %d whole, %d not yet there", whole, raced)
	// (The first few may go before the box follows its master's records.)
	if got := a.StagedPutsLanded(); got < n*3/4 {
		t.Fatalf("%d of %d puts landed staged", got, n)
	}
	staged := a.StagedPutsLanded()
	if st := ip.m.Stats(ctx).Counters; st["puts_staged"] != staged {
		t.Fatalf("master counted %d staged puts, the box landed %d", st["puts_staged"], staged)
	}
	if got := a.DramDirectoryLen(); got != n {
		t.Fatalf("directory holds %d entries after %d puts", got, n)
	}
	// Above the staging bound: PutStart, bytes, PutEnd.
	big := bytes.Repeat([]byte("0123456789abcdef"), (2<<20)/16+1)
	if err := w.Put(ctx, "staged/big", big); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Get(ctx, "staged/big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big: %v", err)
	}
	if got := a.StagedPutsLanded(); got != staged {
		t.Fatalf("a put of %d bytes was staged", len(big))
	}
	// A batch frame of at most 1 MiB is staged whole: one BatchPutStart
	// commits every put of it.
	bkeys := make([]string, 32)
	bvals := make([][]byte, 32)
	for i := range bkeys {
		bkeys[i], bvals[i] = fmt.Sprintf("staged/batch/%d", i), bytes.Repeat([]byte{byte(i), 0xb7}, 4096+i)
	}
	for i, err := range w.BatchPut(ctx, bkeys, bvals) {
		if err != nil {
			t.Fatalf("batch put %d: %v", i, err)
		}
	}
	if got := a.StagedPutsLanded(); got != staged+32 {
		t.Fatalf("a batch frame of 32 puts landed %d staged", got-staged)
	}
	for i, k := range bkeys {
		if got, err := r.Get(ctx, k); err != nil || !bytes.Equal(got, bvals[i]) {
			t.Fatalf("read %s: %v", k, err)
		}
	}
	staged += 32
	// Two writers, one key: both succeed, one stores it.
	w2 := newClient(false)
	var okN, existsN int
	var mu sync.Mutex
	var two sync.WaitGroup
	for _, c := range []*client.Client{w, w2} {
		two.Go(func() {
			err := c.Put(ctx, "staged/twice", val(7))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				okN++
			case kverr.Is(err, kverr.ObjectAlreadyExists):
				existsN++
			default:
				t.Errorf("put of one key by two clients: %v", err)
			}
		})
	}
	two.Wait()
	if okN != 2 { // the second finds it stored, which a put of the same bytes takes as done
		t.Fatalf("two puts of one key: %d answered success, %d already exists", okN, existsN)
	}
	if got, err := r.Get(ctx, "staged/twice"); err != nil || !bytes.Equal(got, val(7)) {
		t.Fatalf("staged/twice: %v", err)
	}
	keys := make([]string, 0, n/2)
	for i := 0; i < n; i += 2 {
		keys = append(keys, fmt.Sprintf("staged/%d", i))
	}
	for _, err := range w.BatchRemove(ctx, keys, true) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := a.DramDirectoryLen(); got != n/2+2+32 {
		t.Fatalf("directory holds %d entries, want %d", got, n/2+2+32)
	}
	for i := range n {
		// (w: r's lease cache would still read the removed ones over
		// shared memory until their leases end, staged or not)
		_, err := w.Get(ctx, fmt.Sprintf("staged/%d", i))
		if removed := i%2 == 0; removed != kverr.Is(err, kverr.ObjectNotFound) {
			t.Fatalf("staged/%d after removing the even ones: %v", i, err)
		}
	}
}
