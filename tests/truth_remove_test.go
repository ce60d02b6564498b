package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// Issue #14 items 1-4: a removal that returned success is never undone by
// a restart of any process; appliance incarnations; default names.

// onDisk reports whether key has a COMPLETE LOCAL_DISK replica.
func onDisk(cl *client.Client, key string) bool {
	info, err := cl.Stat(context.Background(), key)
	if err != nil {
		return false
	}
	for _, r := range info.Replicas {
		if r.Type == kvtierpb.ReplicaType_LOCAL_DISK && r.State == kvtierpb.ReplicaState_COMPLETE {
			return true
		}
	}
	return false
}

func writeFile(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// listAll lists every key the master holds.
func listAll(t *testing.T, cl *client.Client, prefix string) map[string]*kvtierpb.ObjectInfo {
	t.Helper()
	out := map[string]*kvtierpb.ObjectInfo{}
	cursor := ""
	for {
		objs, next, err := cl.List(context.Background(), prefix, cursor, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			out[string(o.Key)] = o
		}
		if next == "" || len(objs) == 0 {
			return out
		}
		cursor = next
	}
}

// rm, then kill -9 of master and appliance, restart both: the key is
// absent, the key beside it is back from SSD.
func TestRemovedStaysRemovedAfterKill9(t *testing.T) {
	ssdDir := t.TempDir()
	c := startCluster(t)
	a := c.appliance("box", "--ssd-dir", ssdDir)
	for _, k := range []string{"r/1", "r/2"} {
		if _, errb, code := c.cli(t, nil, "put", k, writeFile(t, randomBytes(uint64(len(k)), 100_000))); code != 0 {
			t.Fatalf("put %s: %s", k, errb)
		}
	}
	cl := c.client(t)
	eventually(t, 10*time.Second, "both objects on SSD", func() bool { return onDisk(cl, "r/1") && onDisk(cl, "r/2") })
	start := time.Now()
	if _, errb, code := c.cli(t, nil, "rm", "r/1"); code != 0 {
		t.Fatalf("rm: %s", errb)
	}
	t.Logf("rm of an object with an SSD copy (CLI process included): %v", time.Since(start))
	cl.Close()
	a.kill()
	c.master.kill()

	c2 := startCluster(t)
	c2.appliance("box", "--ssd-dir", ssdDir)
	cl2 := c2.client(t)
	eventually(t, 10*time.Second, "r/2 re-registered from SSD", func() bool { ok, _ := cl2.Exist(context.Background(), "r/2"); return ok })
	if ok, _ := cl2.Exist(context.Background(), "r/1"); ok {
		t.Fatal("removed r/1 came back after kill -9 of master and appliance")
	}
	if out, _, _ := c2.cli(t, nil, "ls"); strings.Contains(out, "r/1") {
		t.Fatalf("ls lists removed r/1:\n%s", out)
	}
	if _, err := cl2.Get(context.Background(), "r/1"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("get r/1: %v, want OBJECT_NOT_FOUND", err)
	}
}

// The standalone stopped with SIGTERM and started again on the same SSD
// directory: the removed key stays absent.
func TestRemovedStaysRemovedStandaloneRestart(t *testing.T) {
	ssdDir := t.TempDir()
	args := []string{"standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--data-addr", "127.0.0.1:0",
		"--dram", "64MiB", "--ssd-dir", ssdDir}
	s := start(t, "standalone", args...)
	grpc := s.addrs["grpc"]
	run := func(args ...string) (string, int) {
		out, errb, code := runKvtierCode(t, nil, append(args, "--master", grpc)...)
		return out + errb, code
	}
	for _, k := range []string{"r/1", "r/2"} {
		if out, code := run("put", k, writeFile(t, randomBytes(7, 5000))); code != 0 {
			t.Fatal(out)
		}
	}
	cl, err := client.New(context.Background(), client.Config{MasterAddr: grpc})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "objects on SSD", func() bool { return onDisk(cl, "r/1") && onDisk(cl, "r/2") })
	cl.Close()
	if out, code := run("rm", "r/1"); code != 0 {
		t.Fatal(out)
	}
	s.stop(t)
	s = start(t, "standalone", args...)
	grpc = s.addrs["grpc"]
	eventually(t, 10*time.Second, "r/2 back", func() bool { _, code := run("exist", "r/2"); return code == 0 })
	if out, code := run("exist", "r/1"); code == 0 {
		t.Fatalf("removed r/1 is back after a standalone restart: %s", out)
	}
}

// RemoveAll of 10,000 keys, then re-puts with new bytes, kill -9 of both
// processes and a restart: the removed keys are absent, the re-put ones
// hold their new bytes.
func TestRemoveAllSurvivesRestart(t *testing.T) {
	ssdDir := t.TempDir()
	c := startCluster(t)
	a := c.appliance("box", "--ssd-dir", ssdDir, "--ssd-capacity", "2GiB")
	cl := c.client(t)
	ctx := context.Background()
	const n, size = 10_000, 1000
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				if err := cl.Put(ctx, fmt.Sprintf("all/%05d", i), randomBytes(uint64(i), size)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	stats := func() map[string]uint64 {
		st, err := cl.Master().Stats(ctx, &kvtierpb.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Counters
	}
	eventually(t, 60*time.Second, "all 10,000 offloaded", func() bool { return stats()["offloads_completed"] >= n })
	start := time.Now()
	resp, err := cl.Master().RemoveAll(ctx, &kvtierpb.RemoveAllRequest{})
	if err != nil {
		t.Fatal(kverr.FromGRPC(err))
	}
	t.Logf("RemoveAll of %d objects with SSD copies: %v", resp.GetCount(), time.Since(start))
	if resp.GetCount() != n {
		t.Fatalf("RemoveAll removed %d, want %d", resp.GetCount(), n)
	}
	// Re-put 50 of them with new bytes (the SSD tier held the old ones).
	fresh := map[string][]byte{}
	for i := range 50 {
		k := fmt.Sprintf("all/%05d", i*200)
		fresh[k] = randomBytes(uint64(1_000_000+i), size+7)
		if err := cl.Put(ctx, k, fresh[k]); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 20*time.Second, "re-put objects on SSD", func() bool {
		for k := range fresh {
			if !onDisk(cl, k) {
				return false
			}
		}
		return true
	})
	cl.Close()
	a.kill()
	c.master.kill()

	c2 := startCluster(t)
	c2.appliance("box", "--ssd-dir", ssdDir, "--ssd-capacity", "2GiB")
	cl2 := c2.client(t)
	eventually(t, 20*time.Second, "re-put objects re-registered", func() bool { return len(listAll(t, cl2, "all/")) >= len(fresh) })
	time.Sleep(500 * time.Millisecond) // registration is chunked: let it finish
	got := listAll(t, cl2, "all/")
	if len(got) != len(fresh) {
		t.Fatalf("after restart %d keys listed, want the %d re-put ones", len(got), len(fresh))
	}
	for k, v := range fresh {
		b, err := cl2.Get(ctx, k)
		if err != nil || !bytes.Equal(b, v) {
			t.Fatalf("get %s: %v (new bytes: %v)", k, err, bytes.Equal(b, v))
		}
	}
}

// kill -9 of an appliance under 4 put streams, restarted at once under the
// same name (within the client TTL): every key the master lists reads back
// byte-exact, every lost key can be put again, and the first put to the
// restarted appliance succeeds within 2 s.
func TestApplianceRestartUnderLoad(t *testing.T) {
	ssdDir := t.TempDir()
	c := startCluster(t)
	a := c.appliance("box", "--ssd-dir", ssdDir)
	cl := c.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const size = 64 << 10
	value := func(k string) []byte { return randomBytes(uint64(len(k))*7919+uint64(k[len(k)-1]), size) }
	var mu sync.Mutex
	acked := map[string]bool{}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for s := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("load/%d/%06d", s, i)
				if err := cl.Put(ctx, k, value(k)); err != nil {
					failed.Add(1)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				mu.Lock()
				acked[k] = true
				mu.Unlock()
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	a.kill()
	a2 := c.appliance("box", "--ssd-dir", ssdDir)
	restarted := time.Now()
	var firstOK time.Duration
	for i := 0; ; i++ {
		k := fmt.Sprintf("first/%d", i)
		if err := cl.Put(context.Background(), k, value(k)); err == nil {
			firstOK = time.Since(restarted)
			break
		} else if time.Since(restarted) > 2*time.Second {
			t.Fatalf("no put succeeded within 2s of the restart: %v\n%s", err, a2.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("first put after the restart succeeded %v after the appliance listened", firstOK)
	time.Sleep(time.Second)
	cancel()
	wg.Wait()

	listed := listAll(t, cl, "load/")
	bg := context.Background()
	for k, info := range listed {
		complete := false
		for _, r := range info.Replicas {
			complete = complete || r.State == kvtierpb.ReplicaState_COMPLETE
		}
		if !complete {
			continue
		}
		b, err := cl.Get(bg, k)
		if err != nil || !bytes.Equal(b, value(k)) {
			t.Fatalf("listed COMPLETE %s: %v (bytes equal %v)", k, err, bytes.Equal(b, value(k)))
		}
	}
	lost := 0
	for k := range acked {
		if _, ok := listed[k]; ok {
			continue
		}
		lost++
		if err := cl.Put(bg, k, value(k)); err != nil {
			t.Fatalf("re-put of lost %s: %v", k, err)
		}
		if b, err := cl.Get(bg, k); err != nil || !bytes.Equal(b, value(k)) {
			t.Fatalf("get of re-put %s: %v", k, err)
		}
	}
	t.Logf("%d puts acknowledged, %d listed after the restart, %d lost and put again, %d puts failed during the outage",
		len(acked), len(listed), lost, failed.Load())
	if len(acked) == 0 {
		t.Fatal("no put acknowledged")
	}
}

// Two appliances on one host without --name both serve, under distinct
// names that stay the same across a restart of the same SSD directory.
func TestTwoAppliancesDefaultNames(t *testing.T) {
	c := startCluster(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	var names []string
	for i, d := range dirs {
		p := start(t, fmt.Sprintf("box%d", i), "appliance", "--master", c.grpc, "--dram", "32MiB", "--data-addr", "127.0.0.1:0", "--ssd-dir", d)
		names = append(names, p.addrs["name"])
		if i == 1 {
			p.kill()
			p = start(t, "box1-again", "appliance", "--master", c.grpc, "--dram", "32MiB", "--data-addr", "127.0.0.1:0", "--ssd-dir", d)
			if p.addrs["name"] != names[1] {
				t.Fatalf("default name changed across a restart: %s, then %s", names[1], p.addrs["name"])
			}
		}
	}
	host, _ := os.Hostname()
	if names[0] == names[1] || !strings.HasPrefix(names[0], host+"-") || !strings.HasPrefix(names[1], host+"-") {
		t.Fatalf("default names %q", names)
	}
	cl := c.client(t)
	ctx := context.Background()
	for _, n := range names {
		k := "on/" + n
		v := randomBytes(3, 4096)
		if err := cl.Put(ctx, k, v, client.WithPreferredSegment(n+"/mem0")); err != nil {
			t.Fatal(err)
		}
		info, err := cl.Stat(ctx, k)
		if err != nil || info.Replicas[0].Segment != n+"/mem0" {
			t.Fatalf("put to %s: %v %+v", n, err, info)
		}
		if b, err := cl.Get(ctx, k); err != nil || !bytes.Equal(b, v) {
			t.Fatalf("get from %s: %v", n, err)
		}
	}
	// Without an SSD directory the names differ too.
	p1 := start(t, "nossd1", "appliance", "--master", c.grpc, "--dram", "32MiB", "--data-addr", "127.0.0.1:0", "--ssd-dir", "")
	p2 := start(t, "nossd2", "appliance", "--master", c.grpc, "--dram", "32MiB", "--data-addr", "127.0.0.1:0", "--ssd-dir", "")
	if p1.addrs["name"] == p2.addrs["name"] {
		t.Fatalf("two appliances without SSD share the name %s", p1.addrs["name"])
	}
}

// A second live appliance under a taken name is refused: it exits non-zero
// naming both incarnations, and the first keeps serving.
func TestDuplicateNameRefused(t *testing.T) {
	c := startCluster(t, "--client-ttl", "10s")
	first := c.appliance("dup")
	cmd := []string{"appliance", "--master", c.grpc, "--name", "dup", "--dram", "32MiB", "--data-addr", "127.0.0.1:0", "--ssd-dir", ""}
	// Bounded: an appliance that ignores the conflict would serve forever.
	cctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, kvtierBin, cmd...).CombinedOutput()
	if cctx.Err() != nil {
		t.Fatalf("the duplicate did not exit within 40s:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "held by live incarnation") || !strings.Contains(string(out), "this is incarnation") {
		t.Fatalf("duplicate exited (%v):\n%s", err, out)
	}
	cl := c.client(t)
	if err := cl.Put(context.Background(), "still", randomBytes(1, 100)); err != nil {
		t.Fatalf("the first appliance stopped serving: %v\n%s", err, first.output())
	}
}

// An appliance stopped gracefully (SIGTERM with a drain grace) and started
// again under its name while its old segments drain: the new process's
// segment stays after the old drain ends, and takes puts.
func TestRestartDuringDrain(t *testing.T) {
	c := startCluster(t, "--client-ttl", "10s")
	old := c.appliance("d", "--drain-grace", "2s")
	cl := c.client(t)
	ctx := context.Background()
	if err := cl.Put(ctx, "before", randomBytes(1, 1000)); err != nil {
		t.Fatal(err)
	}
	_ = old.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond) // the drain has begun
	c.appliance("d")
	select {
	case <-old.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the old appliance did not exit")
	}
	time.Sleep(3 * time.Second) // past the old drain's end
	segs, err := cl.Master().ListSegments(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if len(segs.GetSegments()) != 1 || segs.GetSegments()[0].GetState() != kvtierpb.SegmentState_MOUNTED {
		t.Fatalf("segments after the old drain ended: %v", segs)
	}
	if err := cl.Put(ctx, "after", randomBytes(2, 1000), client.WithPreferredSegment("d/mem0")); err != nil {
		t.Fatalf("put to the restarted appliance: %v", err)
	}
}

// An appliance killed and restarted at once (the master never noticed it
// was down) whose SSD bucket is quarantined at recovery: the objects of that
// bucket are no longer listed, and can be put again.
func TestRestartDropsQuarantinedObjects(t *testing.T) {
	ssdDir := t.TempDir()
	c := startCluster(t, "--client-ttl", "30s")
	a := c.appliance("q", "--ssd-dir", ssdDir)
	cl := c.client(t)
	ctx := context.Background()
	keys := []string{"q/1", "q/2", "q/3"}
	for _, k := range keys {
		if err := cl.Put(ctx, k, randomBytes(uint64(len(k)), 50_000)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "objects on SSD", func() bool {
		for _, k := range keys {
			if !onDisk(cl, k) {
				return false
			}
		}
		return true
	})
	a.kill()
	if err := os.Truncate(filepath.Join(ssdDir, "b0000000000000001.data"), 4096); err != nil {
		t.Fatal(err)
	}
	c.appliance("q", "--ssd-dir", ssdDir)
	for _, k := range keys {
		if ok, _ := cl.Exist(ctx, k); ok {
			t.Fatalf("%s of the quarantined bucket is still listed after the restart", k)
		}
		v := randomBytes(99, 1000)
		if err := cl.Put(ctx, k, v); err != nil {
			t.Fatalf("re-put %s: %v", k, err)
		}
		if b, err := cl.Get(ctx, k); err != nil || !bytes.Equal(b, v) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
}
