package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/ha/hatest"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// rebuildValue is the deterministic value of key number i (1 to 24 KiB).
func rebuildValue(prefix string, i int) (string, []byte) {
	n := 1<<10 + int(uint64(i)*7919%(23<<10))
	return fmt.Sprintf("%s/%06d", prefix, i), randomBytes(uint64(i)+uint64(len(prefix))<<32, n)
}

// getRetrying reads key, retrying while the master is unreachable or
// rebuilding (UNAVAILABLE_IN_CURRENT_STATUS), up to within.
func getRetrying(ctx context.Context, cl *client.Client, key string, within time.Duration) ([]byte, error) {
	deadline := time.Now().Add(within)
	for {
		v, err := cl.Get(ctx, key)
		if err == nil || kverr.Is(err, kverr.ObjectNotFound) || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkAll reads every key of want and counts those lost (absent or other
// bytes); keys in gone must be absent.
func checkAll(t *testing.T, cl *client.Client, want map[string][]byte, gone []string) {
	t.Helper()
	ctx := context.Background()
	lost := 0
	for k, v := range want {
		got, err := getRetrying(ctx, cl, k, 20*time.Second)
		if err != nil || !bytes.Equal(got, v) {
			lost++
			if lost <= 5 {
				t.Errorf("%s: err %v, %d bytes (want %d, equal %v)", k, err, len(got), len(v), bytes.Equal(got, v))
			}
		}
	}
	t.Logf("objects complete before the kill: %d, lost: %d", len(want), lost)
	if lost > 0 {
		t.Fatalf("objects lost = %d of %d", lost, len(want))
	}
	for _, k := range gone {
		if _, err := getRetrying(ctx, cl, k, 20*time.Second); !kverr.Is(err, kverr.ObjectNotFound) {
			t.Fatalf("removed key %s came back (err %v)", k, err)
		}
	}
}

// readyBody returns /api/v1/ready's status and body.
func readyBody(httpAddr string) (int, string) {
	resp, err := http.Get("http://" + httpAddr + "/api/v1/ready")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestRebuildSingleMasterRestart: a single (non-HA) master with DRAM-only
// objects (no SSD, offload off) is killed with SIGKILL and started again on
// the same address. The appliances report their DRAM directories; every
// object that was complete reads back byte-exact, removed keys stay
// removed, and new puts after the restart do not overwrite any rebuilt
// object (the extents were re-reserved).
func TestRebuildSingleMasterRestart(t *testing.T) {
	addr := freePort(t)
	args := append([]string{"master", "--grpc-addr", addr, "--http-addr", "127.0.0.1:0", "--offload", "off"}, fastMasterArgs...)
	m := start(t, "master", args...)
	c := &cluster{t: t, master: m, grpc: addr}
	pa := c.appliance("rb-a", "--offload", "off")
	pb := c.appliance("rb-b", "--offload", "off")
	defer func() {
		if t.Failed() {
			t.Logf("rb-a:\n%s\nrb-b:\n%s", pa.output(), pb.output())
		}
	}()
	cl := c.client(t)
	ctx := context.Background()

	want := map[string][]byte{}
	for i := range 400 {
		k, v := rebuildValue("rb", i)
		var opts []client.PutOption
		if i%4 == 0 {
			opts = append(opts, client.WithReplicas(2))
		}
		if err := cl.Put(ctx, k, v, opts...); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	var gone []string
	for i := 0; i < 400; i += 10 {
		k, _ := rebuildValue("rb", i)
		if err := cl.Remove(ctx, k, true); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
		gone = append(gone, k)
	}

	// A put in flight at the kill: never committed, so not rebuilt, and
	// its space is free at the restarted master.
	if _, err := cl.Master().PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: cl.ID(), Key: []byte("rb/in-flight"),
		Size: 1 << 20, Config: &kvtierpb.PutConfig{ReplicaNum: 2}}); err != nil {
		t.Fatal(err)
	}
	// Two more in flight with the client's checksum, whose commit records
	// reach the appliances at PutStart (master/doc.go, "When the commit
	// record travels"): one never written (its entries fail the checksum
	// at the report: not rebuilt, its space free), one written whole but
	// never ended (rebuilt: the bytes are the ones its checksum names, and
	// the writer's late PutEnd at the new master succeeds).
	att, err := transfer.New(transfer.Config{DisableSharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	const inflightSize = 100_000
	written := randomBytes(77, inflightSize)
	for _, k := range []string{"rb/in-flight-sum", "rb/written"} {
		resp, err := cl.Master().PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: cl.ID(), Key: []byte(k), Size: inflightSize,
			Crc32C: client.Checksum(written), HasChecksum: true, Config: &kvtierpb.PutConfig{ReplicaNum: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Replicas) != 2 {
			t.Fatalf("%s: %d replicas, want 2", k, len(resp.Replicas))
		}
		if k != "rb/written" {
			continue
		}
		var reqs []transfer.Request
		for _, r := range resp.Replicas {
			reqs = append(reqs, transfer.Request{Op: transfer.Write, Endpoint: r.Endpoint, Segment: r.Segment, Offset: r.Offset, Buf: written, Grant: r.Grant})
		}
		for _, err := range att.Do(ctx, reqs) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // the records are streamed in milliseconds; the kill must come after
	wantUsed := 2 * uint64((inflightSize+63)/64*64)
	for i := range 400 {
		k, v := rebuildValue("rb", i)
		if _, ok := want[k]; ok {
			n := uint64(1)
			if i%4 == 0 {
				n = 2
			}
			wantUsed += n * ((uint64(len(v)) + 63) / 64 * 64)
		}
	}

	m.kill()
	m2 := start(t, "master-restarted", args...)
	t0 := time.Now()
	sawRebuilding := false
	eventually(t, 20*time.Second, "restarted master ready", func() bool {
		code, body := readyBody(m2.addrs["http"])
		if strings.Contains(body, `"rebuilding":true`) {
			sawRebuilding = true
		}
		return code == http.StatusOK
	})
	t.Logf("restarted master ready %v after start (rebuilding state seen: %v)", time.Since(t0).Round(time.Millisecond), sawRebuilding)
	checkAll(t, cl, want, gone)
	for _, k := range []string{"rb/in-flight", "rb/in-flight-sum"} {
		if _, err := getRetrying(ctx, cl, k, 10*time.Second); !kverr.Is(err, kverr.ObjectNotFound) {
			t.Fatalf("the put %s in flight at the kill: %v, want OBJECT_NOT_FOUND", k, err)
		}
	}
	if _, err := cl.Master().PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: cl.ID(), Key: []byte("rb/written")}); err != nil {
		t.Fatalf("the writer's PutEnd of its put rebuilt by the new master: %v", kverr.FromGRPC(err))
	}
	want["rb/written"] = written
	checkAll(t, cl, want, gone)
	// The unwritten put's two entries were dropped at the report, not refused by the master.
	changed := 0
	for _, m := range regexp.MustCompile(`changed_bytes=(\d+)`).FindAllStringSubmatch(pa.output()+pb.output(), -1) {
		n, _ := strconv.Atoi(m[1])
		changed += n
	}
	if changed < 2 {
		t.Fatalf("the appliances dropped %d directory entries whose bytes failed their checksum, want at least 2 (rb/in-flight-sum)", changed)
	}
	segs, err := cl.Master().ListSegments(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	var used uint64
	for _, s := range segs.GetSegments() {
		used += s.GetUsed()
	}
	if used != wantUsed {
		t.Fatalf("DRAM in use after the rebuild: %d bytes, want %d (the rebuilt objects' extents only)", used, wantUsed)
	}

	// New puts fill the space around the rebuilt objects; none may land on them.
	for i := 1000; i < 1400; i++ {
		k, v := rebuildValue("rb", i)
		if err := cl.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	checkAll(t, cl, want, gone)
	st, err := cl.Master().Stats(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if n := st.GetCounters()["dram_objects_restored"]; n < uint64(len(want)-400) {
		t.Fatalf("dram_objects_restored = %d, want at least %d", n, len(want)-400)
	}
}

// putLoad writes unique keys from writers goroutines until stop, and
// reads back acknowledged ones; it records every acknowledged put.
type putLoad struct {
	mu    sync.Mutex
	acked map[string][]byte
	errs  int
}

func (l *putLoad) run(ctx context.Context, cl *client.Client, prefix string, writers int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := rebuildValue(fmt.Sprintf("%s%d", prefix, w), i)
				v = v[:min(len(v), 8<<10)]
				if err := cl.Put(ctx, k, v); err != nil {
					l.mu.Lock()
					l.errs++
					l.mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					continue
				}
				l.mu.Lock()
				l.acked[k] = v
				l.mu.Unlock()
				if i%4 == 0 { // a steady read load beside the writes
					_, _ = cl.Get(ctx, k)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	return &wg
}

func (l *putLoad) snapshot() map[string][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]byte, len(l.acked))
	for k, v := range l.acked {
		out[k] = v
	}
	return out
}

// startStandby runs a master that blocks in its campaign.
func startStandby(t *testing.T, args ...string) (*exec.Cmd, *lockedBuffer) {
	b := exec.Command(kvtierBin, args...)
	var out lockedBuffer
	b.Stdout, b.Stderr = &out, &out
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Process.Kill(); _ = b.Wait() })
	return b, &out
}

// TestHAFailoverUnderLoadDRAM: two masters with a 2 s etcd session TTL,
// two appliances with offload off (DRAM only), four writers and a read
// load. SIGKILL of the leader: the standby is elected, the appliances find
// it and report their DRAM directories, and every put acknowledged before
// the kill reads back byte-exact; 50 keys removed before the kill stay
// removed. The failover time (kill to the first put
// and get through the new leader) is printed and must be below 5 s.
func TestHAFailoverUnderLoadDRAM(t *testing.T) {
	_, etcd := hatest.StartEtcd(t)
	addrA, addrB := freePort(t), freePort(t)
	common := append([]string{"--etcd", etcd, "--etcd-session-ttl", "2s", "--http-addr", "127.0.0.1:0", "--offload", "off"}, fastMasterArgs...)
	a := start(t, "master-a", append([]string{"master", "--grpc-addr", addrA}, common...)...)
	_, bOut := startStandby(t, append([]string{"master", "--grpc-addr", addrB}, common...)...)
	masters := addrA + "," + addrB
	c := &cluster{t: t, master: a, grpc: masters}
	c.appliance("fo-a", "--offload", "off", "--dram", "256MiB")
	c.appliance("fo-b", "--offload", "off", "--dram", "256MiB")
	cl, err := client.New(context.Background(), client.Config{MasterAddr: masters, HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()

	load := &putLoad{acked: map[string][]byte{}}
	stop := make(chan struct{})
	wg := load.run(ctx, cl, "fo", 4, stop)
	time.Sleep(1500 * time.Millisecond)
	// Removals under the old leader must hold through the failover.
	var gone []string
	for k := range load.snapshot() {
		if len(gone) == 50 {
			break
		}
		if err := cl.Remove(ctx, k, true); err != nil {
			t.Fatalf("remove %s: %v", k, err)
		}
		load.mu.Lock()
		delete(load.acked, k)
		load.mu.Unlock()
		gone = append(gone, k)
	}
	time.Sleep(500 * time.Millisecond)
	a.kill()
	killed := time.Now()
	// Everything acknowledged up to the kill (the writers keep running).
	before := load.snapshot()

	var failover time.Duration
	for i := 0; ; i++ {
		k, v := rebuildValue("probe", i)
		if err := cl.Put(ctx, k, v); err == nil {
			if got, err := cl.Get(ctx, k); err == nil && bytes.Equal(got, v) {
				failover = time.Since(killed)
				break
			}
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no put+get through a new leader within 30s:\n%s", bOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("failover (leader SIGKILL to first put+get through the new leader, etcd TTL 2s): %v", failover.Round(time.Millisecond))
	fmt.Printf("failover time: %v\n", failover.Round(time.Millisecond))
	time.Sleep(1 * time.Second) // load through the new leader
	close(stop)
	wg.Wait()
	if !strings.Contains(bOut.String(), "listening grpc="+addrB) {
		t.Fatalf("the standby did not take over:\n%s", bOut.String())
	}
	checkAll(t, cl, before, gone)
	after := load.snapshot()
	t.Logf("puts acknowledged: %d before the kill, %d in all (%d failed during the failover)", len(before), len(after), load.errs)
	checkAll(t, cl, after, nil)
	if failover >= 5*time.Second {
		t.Fatalf("failover took %v, want < 5s", failover)
	}
}

// etcdHelperEnv makes this test binary run an embedded etcd and nothing
// else (see init), so a test can SIGSTOP etcd as a separate process.
const etcdHelperEnv = "KVTIER_TEST_ETCD_PROCESS"

func init() {
	if os.Getenv(etcdHelperEnv) == "" {
		return
	}
	stopEtcd, url := hatest.StartEtcdProcess()
	defer stopEtcd()
	fmt.Printf("etcd %s\n", url)
	select {} // until killed
}

// TestHADeposedLeaderStops: etcd (its own process) is SIGSTOPped under a
// put load. The leader cannot refresh its session and stops acknowledging
// puts within the 2 s TTL; after SIGCONT a new leader (a higher epoch)
// takes puts. Every PutEnd answer carries the leader's epoch: the spans of
// acknowledgements of two epochs never overlap.
func TestHADeposedLeaderStops(t *testing.T) {
	ecmd := exec.Command(os.Args[0], "-test.run", "^$")
	ecmd.Env = append(os.Environ(), etcdHelperEnv+"=1")
	var eOut lockedBuffer
	ecmd.Stdout, ecmd.Stderr = &eOut, &eOut
	if err := ecmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ecmd.Process.Kill(); _ = ecmd.Wait() })
	var etcd string
	eventually(t, 30*time.Second, "etcd process up", func() bool {
		for _, l := range strings.Split(eOut.String(), "\n") {
			if u, ok := strings.CutPrefix(l, "etcd "); ok {
				etcd = u
				return true
			}
		}
		return false
	})
	addrA, addrB := freePort(t), freePort(t)
	common := append([]string{"--etcd", etcd, "--etcd-session-ttl", "2s", "--http-addr", "127.0.0.1:0", "--offload", "off"}, fastMasterArgs...)
	a := start(t, "master-a", append([]string{"master", "--grpc-addr", addrA}, common...)...)
	_, bOut := startStandby(t, append([]string{"master", "--grpc-addr", addrB}, common...)...)
	masters := addrA + "," + addrB
	c := &cluster{t: t, master: a, grpc: masters}
	box := c.appliance("ep-a", "--offload", "off")
	cl, err := client.New(context.Background(), client.Config{MasterAddr: masters, HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	type ack struct {
		epoch int64
		at    time.Time
	}
	var mu sync.Mutex
	var acks []ack
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				key := []byte(fmt.Sprintf("epoch/%d/%d", w, i))
				_, err := cl.Master().PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: cl.ID(), Key: key, Size: 4096,
					Config: &kvtierpb.PutConfig{ReplicaNum: 1}})
				if err == nil {
					var e *kvtierpb.Empty
					e, err = cl.Master().PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: cl.ID(), Key: key})
					if err == nil {
						mu.Lock()
						acks = append(acks, ack{e.GetLeaderEpoch(), time.Now()})
						mu.Unlock()
					}
				}
				cancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	stopped := time.Now()
	if err := ecmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The deposed leader must stop answering on its gRPC port within the TTL.
	for {
		conn, err := net.DialTimeout("tcp", addrA, 100*time.Millisecond)
		if err != nil {
			break
		}
		conn.Close()
		if time.Since(stopped) > 2*time.Second {
			t.Fatalf("the leader still accepts connections 2s (the TTL) after etcd stopped:\n%s", a.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("leader stopped serving %v after etcd was stopped (TTL 2s)", time.Since(stopped).Round(time.Millisecond))
	eventually(t, 5*time.Second, "the leader says it lost its leadership", func() bool { return strings.Contains(a.output(), "leadership lost") })
	select {
	case <-a.exited:
		t.Logf("leader exited %v after etcd was stopped", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the leader still runs 10s after etcd stopped:\n%s", a.output())
	}
	time.Sleep(500 * time.Millisecond)
	if err := ecmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		ok := len(acks) > 0 && acks[len(acks)-1].at.After(resumed) && acks[len(acks)-1].epoch != acks[0].epoch
		n := len(acks)
		mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			// (CI at 4005fb0 failed here once, not reproduced in 8 runs
			// alone or beside other tests: what the processes said)
			t.Fatalf("not within 30s: a new leader acknowledges puts (%d acknowledged before)\n--- standby:\n%s\n--- appliance:\n%s\n--- etcd:\n%s",
				n, bOut.String(), box.output(), eOut.String())
		}
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	first := acks[0].epoch
	spans := map[int64][2]time.Time{}
	var lastOld time.Time
	for _, x := range acks {
		if x.epoch <= 0 {
			t.Fatalf("a PutEnd answer without a leader epoch: %d", x.epoch)
		}
		s, ok := spans[x.epoch]
		if !ok {
			s = [2]time.Time{x.at, x.at}
		}
		s[0], s[1] = minTime(s[0], x.at), maxTime(s[1], x.at)
		spans[x.epoch] = s
		if x.epoch == first {
			lastOld = maxTime(lastOld, x.at)
		}
	}
	if d := lastOld.Sub(stopped); d >= 2*time.Second {
		t.Fatalf("the deposed leader acknowledged a put %v after etcd stopped (TTL 2s)", d)
	}
	t.Logf("deposed leader's last acknowledgement %v after etcd stopped (TTL 2s)", lastOld.Sub(stopped).Round(time.Millisecond))
	epochs := make([]int64, 0, len(spans))
	for e := range spans {
		epochs = append(epochs, e)
	}
	slices.Sort(epochs)
	if len(epochs) < 2 {
		t.Fatalf("one epoch only: %v", epochs)
	}
	for i := 1; i < len(epochs); i++ {
		prev, cur := spans[epochs[i-1]], spans[epochs[i]]
		if !prev[1].Before(cur[0]) {
			t.Fatalf("epochs %d [%v, %v] and %d [%v, %v] overlap", epochs[i-1], prev[0], prev[1], epochs[i], cur[0], cur[1])
		}
		t.Logf("epoch %d acknowledged until %v, epoch %d from %v", epochs[i-1], prev[1].Format("15:04:05.000"), epochs[i], cur[0].Format("15:04:05.000"))
	}
	if !strings.Contains(bOut.String(), "listening grpc="+addrB) {
		t.Logf("the new leader is not the standby (the old leader's process came back?):\n%s", bOut.String())
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// BenchmarkPutDramDirectory is what the DRAM directory costs a put: 4 KiB
// puts into a standalone store that keeps it (PutEnd waits for the
// appliance to record the commit) beside one started with
// --no-dram-directory, in the same run, with GOMAXPROCS callers and 8 x that.
//
//	go test -run '^$' -bench PutDramDirectory -benchtime 3000x ./tests/
func BenchmarkPutDramDirectory(b *testing.B) {
	for _, dir := range []bool{true, false} {
		args := []string{"standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--name", "bench-dir",
			"--dram", "512MiB", "--ssd-dir", "", "--offload", "off"}
		name := "directory"
		if !dir {
			args, name = append(args, "--no-dram-directory"), "none"
		}
		c := &benchCluster{grpc: startProcB(b, args...)["grpc"]}
		cl := c.newClient(b)
		v := randomBytes(7, 4<<10)
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/callers=%d", name, par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
				ctx := context.Background()
				var mu sync.Mutex
				next := 0
				b.SetParallelism(par)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						mu.Lock()
						next++
						k := fmt.Sprintf("bench/%s/%d/%d", name, par, next)
						mu.Unlock()
						if err := cl.Put(ctx, k, v); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
