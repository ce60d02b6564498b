package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestTwoReplicasOnTwoAppliancesSurviveSIGKILL: a master, two appliances and
// a client as separate processes; 2-replica puts land on two segments of two
// boxes; every size reads back byte-exact; after SIGKILL of one appliance
// every object is still readable from the other. Once with the appliances
// sharing their DRAM with same-host clients (the default: bytes move by
// memcpy through the mapped memory) and once with --shm=false (loopback TCP).
func TestTwoReplicasOnTwoAppliancesSurviveSIGKILL(t *testing.T) {
	t.Run("shared-memory", func(t *testing.T) { twoReplicasSurviveSIGKILL(t, true) })
	t.Run("tcp", func(t *testing.T) { twoReplicasSurviveSIGKILL(t, false) })
}

func twoReplicasSurviveSIGKILL(t *testing.T, shm bool) {
	// A 64 MiB put or get on a loaded 2-vCPU host (under -race) can outlast
	// the fast 1 s discard timeout and read lease; this test is about
	// SIGKILL, not about stalled writers or leases ending mid-read.
	c := startCluster(t, "--put-discard-timeout", "20s", "--put-release-timeout", "40s", "--lease-ttl", "20s")
	flag := "--shm=" + strconv.FormatBool(shm)
	a1 := c.appliance("box-a", flag)
	c.appliance("box-b", flag)
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// An appliance says "listening" before its segment's mount reaches
	// the master: a 2-replica put right away can find one box only (CI,
	// 2026-12-03, the tcp case: "1 replicas, want 2").
	mounted := 0
	eventually(t, 10*time.Second, "both appliances' segments mounted", func() bool {
		mounted++
		key := "mounted/" + strconv.Itoa(mounted)
		if err := cl.Put(ctx, key, []byte("x"), client.WithReplicas(2)); err != nil {
			t.Fatal(err)
		}
		info, err := cl.Stat(ctx, key)
		return err == nil && len(info.Replicas) == 2
	})
	if shm {
		// The client maps a box's segments in the background on first
		// contact; until then it uses TCP.
		n := 0
		eventually(t, 10*time.Second, "both replicas written through shared memory", func() bool {
			n++
			was := cl.Engine().Stats().SharedRequests
			if err := cl.Put(ctx, "warm-up/"+strconv.Itoa(n), []byte("x"), client.WithReplicas(2)); err != nil {
				t.Fatal(err)
			}
			return cl.Engine().Stats().SharedRequests-was == 2
		})
	}
	before := cl.Engine().Stats()

	sizes := []int{1, 4 << 10, 1 << 20, 64 << 20}
	sums := map[string][32]byte{}
	for i, n := range sizes {
		key := "obj/" + strings.Repeat("x", i) + "/" + string(rune('a'+i))
		v := randomBytes(uint64(i+1), n)
		sums[key] = sha256.Sum256(v)
		if err := cl.Put(ctx, key, v, client.WithReplicas(2)); err != nil {
			t.Fatalf("put %d bytes: %v", n, err)
		}
		info, err := cl.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Replicas) != 2 {
			t.Fatalf("%s: %d replicas, want 2", key, len(info.Replicas))
		}
		if info.Replicas[0].Segment == info.Replicas[1].Segment || info.Replicas[0].Node == info.Replicas[1].Node {
			t.Fatalf("%s: replicas share a segment or node: %v / %v", key, info.Replicas[0], info.Replicas[1])
		}
	}
	for key, sum := range sums {
		got, err := cl.Get(ctx, key)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		if sha256.Sum256(got) != sum {
			t.Fatalf("get %s: bytes differ", key)
		}
	}

	st := cl.Engine().Stats()
	if shm && (st.SharedRequests-before.SharedRequests < uint64(3*len(sizes)) || st.SharedFailures != 0) {
		t.Fatalf("shared memory: %d of the puts' and gets' transfers went through it, want every one (%+v)", st.SharedRequests-before.SharedRequests, st)
	}
	if !shm && (st.SharedRequests != 0 || st.TCPRequests-before.TCPRequests < uint64(3*len(sizes))) {
		t.Fatalf("--shm=false: transfers did not all go over TCP (%+v)", st)
	}

	a1.kill()
	for key, sum := range sums {
		got, err := cl.Get(ctx, key)
		if err != nil {
			t.Fatalf("after SIGKILL of box-a, get %s: %v", key, err)
		}
		if sha256.Sum256(got) != sum {
			t.Fatalf("after SIGKILL, get %s: bytes differ", key)
		}
	}
}

// TestSingleReplicaOnKilledApplianceIsNotFound: an object whose only copy was
// on a killed box reports OBJECT_NOT_FOUND once the master declares the box
// gone, never wrong bytes. A client on the box's host maps its memory: the
// pages stay mapped until the client's engine sees the box's
// shared-memory session end (a goroutine woken by the socket's EOF, late
// on a loaded machine), and a read in that moment gets the object's own
// bytes (seen once in a CI run). Over TCP no read of a killed box succeeds.
func TestSingleReplicaOnKilledApplianceIsNotFound(t *testing.T) {
	c := startCluster(t)
	a := c.appliance("only-box")
	cl := c.client(t)
	ctx := context.Background()
	want := randomBytes(7, 4096)
	if err := cl.Put(ctx, "lonely", want); err != nil {
		t.Fatal(err)
	}
	a.kill()
	eventually(t, 15*time.Second, "object on the killed box reported OBJECT_NOT_FOUND", func() bool {
		shared := cl.Engine().Stats().SharedRequests
		got, err := cl.Get(ctx, "lonely")
		if err == nil {
			switch {
			case !bytes.Equal(got, want):
				t.Fatal("read of a killed appliance returned other bytes")
			case cl.Engine().Stats().SharedRequests == shared:
				t.Fatal("read succeeded from a killed appliance, not through its still-mapped memory")
			}
			return false
		}
		return kverr.Is(err, kverr.ObjectNotFound)
	})
}

// TestKilledWriterNeverVisible: a writer process killed between PutStart and
// PutEnd leaves nothing visible, and after the timeouts the key is writable
// and the space is back.
func TestKilledWriterNeverVisible(t *testing.T) {
	// The window in which the stalled reservation must be seen holding its
	// space runs from the discard timeout (1 s) to the release timeout: 8 s
	// here, so a loaded host cannot run the first retry past it.
	c := startCluster(t, "--put-release-timeout", "8s")
	c.appliance("box", "--dram", "16MiB")
	cl := c.client(t)
	ctx := context.Background()

	// A separate process calls PutStart for 12 of the 16 MiB and is killed
	// before PutEnd, like an inference process dying mid-put.
	w := startWriter(t, c.grpc, "abandoned", 12<<20)
	w.kill()

	if ok, err := cl.Exist(ctx, "abandoned"); err != nil || ok {
		t.Fatalf("abandoned put visible: exist=%v err=%v", ok, err)
	}
	if _, err := cl.Get(ctx, "abandoned"); err == nil {
		t.Fatal("abandoned put readable")
	}
	// The reservation holds 12 of 16 MiB until the release timeout: a second
	// large object does not fit yet, then does.
	// Until the discard timeout the key is in flight (a same-size put is
	// "already stored" without writing); after it, the key may be taken over,
	// but the stalled writer's 12 MiB stay reserved until the release timeout.
	var sawNoSpace bool
	eventually(t, 20*time.Second, "abandoned space reclaimed and key writable", func() bool {
		res, err := cl.PutWithResult(ctx, "abandoned", randomBytes(3, 12<<20))
		if kverr.Is(err, kverr.NoAvailableHandle) {
			sawNoSpace = true
		}
		return err == nil && !res.AlreadyStored
	})
	if !sawNoSpace {
		t.Error("the abandoned reservation was freed before the release timeout")
	}
	got, err := cl.Get(ctx, "abandoned")
	if err != nil || !bytes.Equal(got, randomBytes(3, 12<<20)) {
		t.Fatalf("rewritten key: err=%v", err)
	}
}

// TestLeaseBlocksRemoveUntilExpiry: remove of a just-read object fails with
// OBJECT_HAS_LEASE and succeeds after the lease (1 s here).
func TestLeaseBlocksRemoveUntilExpiry(t *testing.T) {
	c := startCluster(t)
	c.appliance("box")
	cl := c.client(t)
	ctx := context.Background()
	if err := cl.Put(ctx, "leased", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	// Exist must not lease.
	if ok, _ := cl.Exist(ctx, "leased"); !ok {
		t.Fatal("exist false after put")
	}
	if err := cl.Remove(ctx, "leased", false); err != nil {
		t.Fatalf("remove after exist only (no lease) failed: %v", err)
	}
	if err := cl.Put(ctx, "leased", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Get(ctx, "leased"); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := c.cli(t, nil, "rm", "leased")
	if code == 0 || !strings.Contains(stderr, "OBJECT_HAS_LEASE") {
		t.Fatalf("rm of a leased object: exit %d, stderr %q", code, stderr)
	}
	eventually(t, 5*time.Second, "remove succeeds after the lease", func() bool {
		return cl.Remove(ctx, "leased", false) == nil
	})
	if ok, _ := cl.Exist(ctx, "leased"); ok {
		t.Fatal("object still exists after remove")
	}
}

// TestPutLargerThanFreeSpace: NO_AVAILABLE_HANDLE, nothing left behind.
func TestPutLargerThanFreeSpace(t *testing.T) {
	c := startCluster(t)
	c.appliance("box", "--dram", "8MiB")
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, randomBytes(1, 9<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := c.cli(t, nil, "put", "too-big", big)
	if code == 0 || !strings.Contains(stderr, "NO_AVAILABLE_HANDLE") {
		t.Fatalf("put larger than DRAM: exit %d, stderr %q", code, stderr)
	}
	if _, _, code := c.cli(t, nil, "exist", "too-big"); code != 1 {
		t.Fatalf("exist after refused put: exit %d, want 1", code)
	}
	out, _, code := c.cli(t, nil, "ls", "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("ls after refused put: exit %d, %q", code, out)
	}
}

// TestCLIVerbs drives put/get/exist/stat/ls/rm as a user would.
func TestCLIVerbs(t *testing.T) {
	c := startCluster(t)
	c.appliance("box-1")
	c.appliance("box-2")
	dir := t.TempDir()
	val := randomBytes(9, 300<<10)
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, val, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := c.cli(t, nil, "put", "dir/with/slashes", in, "--replicas", "2"); code != 0 {
		t.Fatalf("put: %d %s %s", code, out, errs)
	}
	if out, _, code := c.cli(t, nil, "put", "dir/with/slashes", in); code != 0 || !strings.Contains(out, "already stored") {
		t.Fatalf("second put of the same key: exit %d, %q (want success, already stored)", code, out)
	}
	if _, _, code := c.cli(t, []byte("stdin value"), "put", "from-stdin", "-", "--hard-pin"); code != 0 {
		t.Fatal("put from stdin failed")
	}
	// No FILE: standard input when it is a pipe; on a character device
	// (a terminal, or /dev/null here) a usage error, not a wait for typing.
	if _, errs, code := c.cli(t, []byte("piped value"), "put", "piped"); code != 0 {
		t.Fatalf("put KEY with a pipe on stdin: exit %d %s", code, errs)
	}
	if out, _, _ := c.cli(t, nil, "get", "piped"); out != "piped value" {
		t.Fatalf("get piped: %q", out)
	}
	if _, errs, code := c.cli(t, nil, "put", "no-file"); code != 2 || !strings.Contains(errs, "give FILE") {
		t.Fatalf("put KEY with stdin on a character device: exit %d %q, want 2 and the usage", code, errs)
	}
	if _, errs, code := c.cli(t, []byte{}, "put", "empty-pipe"); code != 2 || !strings.Contains(errs, "empty value") {
		t.Fatalf("put KEY of an empty pipe: exit %d %q, want 2, empty value", code, errs)
	}
	outFile := filepath.Join(dir, "out")
	if _, errs, code := c.cli(t, nil, "get", "dir/with/slashes", "-o", outFile); code != 0 {
		t.Fatalf("get: %s", errs)
	}
	if got, _ := os.ReadFile(outFile); !bytes.Equal(got, val) {
		t.Fatal("get -o wrote different bytes")
	}
	if out, _, _ := c.cli(t, nil, "get", "from-stdin"); out != "stdin value" {
		t.Fatalf("get to stdout: %q", out)
	}
	if _, _, code := c.cli(t, nil, "exist", "dir/with/slashes"); code != 0 {
		t.Fatalf("exist present: exit %d", code)
	}
	if _, _, code := c.cli(t, nil, "exist", "nope"); code != 1 {
		t.Fatalf("exist absent: exit %d, want 1", code)
	}
	out, _, code := c.cli(t, nil, "stat", "dir/with/slashes", "--json")
	if code != 0 {
		t.Fatal("stat failed")
	}
	var st struct {
		Key           string `json:"key"`
		Size          int    `json:"size"`
		LeaseDeadline string `json:"lease_deadline"`
		Replicas      []struct {
			Type, State, Segment string
		} `json:"replicas"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stat --json: %v: %s", err, out)
	}
	if st.Key != "dir/with/slashes" || st.Size != len(val) || len(st.Replicas) != 2 || st.Replicas[0].Type != "MEMORY" || st.Replicas[0].State != "COMPLETE" {
		t.Fatalf("stat --json: %+v", st)
	}
	if st.LeaseDeadline == "" {
		t.Fatal("stat after get shows no lease deadline")
	}
	out, _, _ = c.cli(t, nil, "ls", "--prefix", "dir/", "--json")
	if !strings.Contains(out, "dir/with/slashes") || strings.Contains(out, "from-stdin") {
		t.Fatalf("ls --prefix: %s", out)
	}
	if pos, _, code := c.cli(t, nil, "ls", "dir/", "--json"); code != 0 || pos != out {
		t.Fatalf("ls dir/ (exit %d) lists otherwise than ls --prefix dir/:\n%s\n%s", code, pos, out)
	}
	for _, args := range [][]string{{"ls", "dir/", "--prefix", "other/"}, {"ls", "--limit", "0"}} {
		if _, errs, code := c.cli(t, nil, args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2 (usage): %s", args, code, errs)
		}
	}
	_, errs, code := c.cli(t, nil, "get", "missing")
	if code == 0 || !strings.Contains(errs, "OBJECT_NOT_FOUND") {
		t.Fatalf("get missing: exit %d %q", code, errs)
	}
	if _, errs, code := c.cli(t, nil, "rm", "from-stdin", "--force"); code != 0 {
		t.Fatalf("rm --force: %s", errs)
	}
	_, errs, code = c.cli(t, nil, "put", "", in)
	if code == 0 || !strings.Contains(errs, "INVALID") {
		t.Fatalf("put with empty key: exit %d %q", code, errs)
	}
}

// TestApplianceSIGTERMUnmounts: SIGTERM drains and unmounts; objects that
// lived only there are gone, with OBJECT_NOT_FOUND.
func TestApplianceSIGTERMUnmounts(t *testing.T) {
	c := startCluster(t)
	a := c.appliance("box")
	cl := c.client(t)
	ctx := context.Background()
	if err := cl.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	a.stop(t)
	if _, err := cl.Get(ctx, "k"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("get after clean appliance shutdown: %v, want OBJECT_NOT_FOUND", err)
	}
}
