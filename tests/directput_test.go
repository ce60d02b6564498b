package tests

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// tcpClient is an SDK client whose transfers all cross TCP (no shared
// memory), as a remote GPU node's: where direct puts apply.
func tcpClient(t *testing.T, addr string, mod func(*client.Config)) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := client.Config{MasterAddr: addr, HeartbeatInterval: 200 * time.Millisecond,
		Transfer: transfer.Config{DisableSharedMemory: true}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitDirect returns once a put of c goes direct, and the count of c's
// direct puts then. A master takes puts into a box's segments only once
// the box reported its DRAM directory (UNAVAILABLE_IN_CURRENT_STATUS until
// then, which a direct put leaves to the classic path and its retries).
func waitDirect(t *testing.T, c *client.Client, opts ...client.PutOption) uint64 {
	t.Helper()
	probe := 0
	eventually(t, 10*time.Second, "a put goes direct", func() bool {
		probe++
		before := c.Engine().Stats().DirectPuts
		if err := c.Put(context.Background(), fmt.Sprintf("probe/%s/%d", c.ID(), probe), []byte("x"), opts...); err != nil {
			t.Fatal(err)
		}
		return c.Engine().Stats().DirectPuts > before
	})
	return c.Engine().Stats().DirectPuts
}

// directScenario runs the direct-put scenario against the master at addr
// whose appliances take direct puts: single and batch puts go direct
// (counted by the client's engine) and read back bit-exact, the
// already-exists rules hold, a batch partly fails per key, a removed key
// does not come back.
func directScenario(t *testing.T, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := tcpClient(t, addr, nil)
	direct := func() uint64 { return c.Engine().Stats().DirectPuts }
	waitDirect(t, c)
	check := func(key string, want []byte) {
		t.Helper()
		got, err := c.Get(ctx, key)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %s: %d bytes, %v (want %d bytes)", key, len(got), err, len(want))
		}
	}
	for i, size := range []int{1, 4 << 10, 64 << 10, 1 << 20, 3<<20 + 3} {
		key := fmt.Sprintf("single/%d", i)
		v := randomBytes(uint64(i+1), size)
		before := direct()
		res, err := c.PutWithResult(ctx, key, v)
		if err != nil || res.AlreadyStored || res.Replicas != 1 {
			t.Fatalf("put %s (%d bytes): %+v %v", key, size, res, err)
		}
		if direct() != before+1 {
			t.Fatalf("put %s did not go direct", key)
		}
		check(key, v)
	}
	// Pins travel in the frame: the object is pinned as a classic put's.
	before := direct()
	if err := c.Put(ctx, "pinned/soft", []byte("soft"), client.WithSoftPin(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "pinned/hard", []byte("hard"), client.WithHardPin()); err != nil {
		t.Fatal(err)
	}
	if direct() != before+2 {
		t.Fatal("pinned puts did not go direct")
	}
	if info, err := c.Stat(ctx, "pinned/soft"); err != nil || !info.GetSoftPin() || info.GetHardPin() ||
		time.Until(time.UnixMilli(info.GetSoftPinDeadlineMs())) < 50*time.Minute {
		t.Fatalf("soft-pinned direct put: %v %v", info, err)
	}
	if info, err := c.Stat(ctx, "pinned/hard"); err != nil || !info.GetHardPin() {
		t.Fatalf("hard-pinned direct put: %v %v", info, err)
	}
	// First writer wins: the same size again is "already stored".
	v := randomBytes(1, 1)
	if res, err := c.PutWithResult(ctx, "single/0", v); err != nil || !res.AlreadyStored {
		t.Fatalf("same key, same size: %+v %v", res, err)
	}
	if err := c.Put(ctx, "single/0", []byte("xx")); !kverr.Is(err, kverr.ObjectAlreadyExists) {
		t.Fatalf("same key, other size: %v", err)
	}
	// A batch goes direct in one frame; read back bit-exact.
	keys, vals := make([]string, 16), make([][]byte, 16)
	for i := range keys {
		keys[i], vals[i] = fmt.Sprintf("batch/%d", i), randomBytes(uint64(100+i), 64<<10)
	}
	before = direct()
	for i, err := range c.BatchPut(ctx, keys, vals) {
		if err != nil {
			t.Fatalf("batch put %s: %v", keys[i], err)
		}
	}
	if direct() != before+16 {
		t.Fatalf("batch: %d puts went direct, want 16", direct()-before)
	}
	got, errs := c.BatchGet(ctx, keys)
	for i := range keys {
		if errs[i] != nil || !bytes.Equal(got[i], vals[i]) {
			t.Fatalf("batch get %s: %v", keys[i], errs[i])
		}
	}
	// Partial failure: one key exists with another size, one repeats a
	// stored key with its size (success), the others are new and commit.
	keys2 := []string{"batch/0", "batch/1", "batch2/a", "batch2/b"}
	vals2 := [][]byte{[]byte("short"), vals[1], randomBytes(7, 1000), randomBytes(8, 2000)}
	errs = c.BatchPut(ctx, keys2, vals2)
	if !kverr.Is(errs[0], kverr.ObjectAlreadyExists) || errs[1] != nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("partial batch: %v", errs)
	}
	check("batch/0", vals[0])
	check("batch2/a", vals2[2])
	check("batch2/b", vals2[3])
	// A removed key does not come back, and can be put again.
	if err := c.Remove(ctx, "batch2/a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "batch2/a"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("removed key: %v", err)
	}
	if ok, err := c.Exist(ctx, "batch2/a"); err != nil || ok {
		t.Fatalf("removed key exists: %v %v", ok, err)
	}
	nv := randomBytes(9, 3000)
	if err := c.Put(ctx, "batch2/a", nv); err != nil {
		t.Fatal(err)
	}
	check("batch2/a", nv)
	// Above DirectPutMax a put takes the classic path.
	before = direct()
	big := randomBytes(10, client.DefaultDirectPutMax+1)
	if err := c.Put(ctx, "single/big", big); err != nil || direct() != before {
		t.Fatalf("a put above DirectPutMax: %v, direct %d -> %d", err, before, direct())
	}
	check("single/big", big)
	// Off, the same client path is the classic one.
	off := tcpClient(t, addr, func(cfg *client.Config) { cfg.DisableDirectPut = true })
	if err := off.Put(ctx, "classic/1", nv); err != nil {
		t.Fatal(err)
	}
	if off.Engine().Stats().DirectPuts != 0 || off.Engine().Stats().TCPRequests == 0 {
		t.Fatalf("DisableDirectPut: %+v", off.Engine().Stats())
	}
	check("classic/1", nv)
	// Every commit reached the box's DRAM directory within the PutEnd
	// (in a standalone over the in-process records stream).
	st, err := c.Master().Stats(ctx, &kvtierpb.Empty{})
	if err != nil || st.GetCounters()["dram_commits_unconfirmed"] != 0 {
		t.Fatalf("unconfirmed commits: %v %v", st.GetCounters()["dram_commits_unconfirmed"], err)
	}
	// The master counts the puts boxes placed for their clients: the 16 of
	// the batch among them, and not the classic ones (single/big, classic/1).
	if d, s := st.GetCounters()["puts_direct"], st.GetCounters()["puts_started"]; d < 16 || d > s-2 {
		t.Fatalf("puts_direct %d of puts_started %d", d, s)
	}
}

// TestDirectPutStandalone: direct puts against a standalone (appliance and
// master in one process: the box places puts, and takes its DRAM
// directory's records, in-process), with data-plane grants on (the
// default: tickets signed and checked) and off.
func TestDirectPutStandalone(t *testing.T) {
	for _, grants := range []string{"true", "false"} {
		t.Run("grants="+grants, func(t *testing.T) {
			p := start(t, "standalone", "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
				"--dram", "128MiB", "--hugepages", "off", "--ssd-dir", "", "--offload", "off", "--data-grants="+grants)
			directScenario(t, p.addrs["grpc"])
		})
	}
}

// TestDirectPutSeparateMaster: the same with the master and the appliance
// in processes of their own (the box reaches the master over its client
// connection), and a client of another process.
//
// Then 8 clients of 4 callers each put at once: the box coalesces the
// PutStarts and PutEnds of different clients into batch calls carrying
// each put's own ticket; every put is stored, bit-exact, as its own
// client's (its writer).
func TestDirectPutSeparateMaster(t *testing.T) {
	c := startCluster(t)
	c.appliance("box-a")
	directScenario(t, c.grpc)
	concurrentClients(t, c.grpc, nil)
}

// concurrentClients runs 8 clients x 4 callers of direct puts at once
// (mod adjusts client i's configuration) and checks every object.
func concurrentClients(t *testing.T, addr string, mod func(i int, cfg *client.Config)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	cls := make([]*client.Client, 8)
	for i := range cls {
		cls[i] = tcpClient(t, addr, func(cfg *client.Config) {
			cfg.ClientID = fmt.Sprintf("many-%d", i)
			if mod != nil {
				mod(i, cfg)
			}
		})
	}
	base := make([]uint64, len(cls))
	for i, cl := range cls {
		base[i] = waitDirect(t, cl)
	}
	for i, cl := range cls {
		for g := range 4 {
			wg.Go(func() {
				for k := range 25 {
					key := fmt.Sprintf("many/%d/%d/%d", i, g, k)
					if err := cl.Put(ctx, key, randomBytes(uint64(i*1000+g*100+k), 8<<10)); err != nil {
						t.Errorf("%s: %v", key, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, cl := range cls {
		if n := cl.Engine().Stats().DirectPuts - base[i]; n != 100 {
			t.Fatalf("client %d: %d of 100 puts went direct", i, n)
		}
		for g := range 4 {
			for k := range 25 {
				key := fmt.Sprintf("many/%d/%d/%d", i, g, k)
				got, err := cl.Get(ctx, key)
				if err != nil || !bytes.Equal(got, randomBytes(uint64(i*1000+g*100+k), 8<<10)) {
					t.Fatalf("%s: %v", key, err)
				}
			}
		}
		info, err := cl.Stat(ctx, fmt.Sprintf("many/%d/0/0", i))
		if err != nil || info.GetWriter() != fmt.Sprintf("many-%d", i) {
			t.Fatalf("writer of client %d's put: %v %v", i, info.GetWriter(), err)
		}
	}
}

// TestDirectPutFallback: a put the chosen appliance has no room for is
// answered "no room here" and placed by the master elsewhere (the
// classic path); a client whose appliance took no direct puts at all
// (--shm on the same host: shared memory) uses the classic path too.
func TestDirectPutFallback(t *testing.T) {
	c := startCluster(t)
	c.appliance("box-a", "--dram", "8MiB")
	c.appliance("box-b", "--dram", "64MiB")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := tcpClient(t, c.grpc, nil)
	eventually(t, 10*time.Second, "both boxes mounted", func() bool {
		segs, err := cl.Master().ListSegments(ctx, &kvtierpb.Empty{})
		return err == nil && len(segs.GetSegments()) == 2
	})
	pref := client.WithPreferredSegment("box-a/mem0")
	waitDirect(t, cl, pref)
	// Fill box-a with hard-pinned objects (unevictable), directly.
	filled := 0
	for i := 0; ; i++ {
		before := cl.Engine().Stats().DirectPuts
		key := fmt.Sprintf("fill/%d", i)
		if err := cl.Put(ctx, key, randomBytes(uint64(i), 1<<20), pref, client.WithHardPin()); err != nil {
			t.Fatal(err)
		}
		if cl.Engine().Stats().DirectPuts == before {
			break // box-a said no room: the master placed it
		}
		filled++
		if i > 16 {
			t.Fatal("an 8 MiB box took 16 MiB")
		}
	}
	if filled < 4 {
		t.Fatalf("only %d puts went direct to box-a", filled)
	}
	info, err := cl.Stat(ctx, fmt.Sprintf("fill/%d", filled))
	if err != nil || len(info.GetReplicas()) != 1 || info.GetReplicas()[0].GetNode() != "box-b" {
		t.Fatalf("fallback put: %+v %v", info, err)
	}
	v := randomBytes(99, 1<<20)
	if err := cl.Put(ctx, "after-full", v, pref); err != nil {
		t.Fatal(err)
	}
	got, err := cl.Get(ctx, "after-full")
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get after fallback: %v", err)
	}
	// A batch too: every key answered "no room" takes the classic path.
	keys, vals := []string{"fb/1", "fb/2", "fb/3"}, [][]byte{v, v[:1000], v[:2000]}
	for i, err := range cl.BatchPut(ctx, keys, vals, pref) {
		if err != nil {
			t.Fatalf("batch fallback %s: %v", keys[i], err)
		}
	}
	for i, k := range keys {
		got, err := cl.Get(ctx, k)
		if err != nil || !bytes.Equal(got, vals[i]) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
}

// TestDirectPutTickets: over real TCP, the appliance's data port (grants
// on) refuses a direct-put frame whose ticket is missing its signature,
// forged (a byte changed: another tenant), for another node, or signed
// by a key it does not hold, with PERMISSION_DENIED naming the reason;
// nothing is stored and the refusals are counted. A ticket handed to one
// client does not let another name itself: the master re-checks it when
// the appliance places the put.
func TestDirectPutTickets(t *testing.T) {
	c := startCluster(t)
	c.appliance("box-a")
	c.appliance("box-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(c.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ms := kvtierpb.NewMasterClient(conn)
	var ep string
	eventually(t, 10*time.Second, "box-a takes direct puts", func() bool {
		segs, err := ms.ListSegments(ctx, &kvtierpb.Empty{})
		if err != nil {
			return false
		}
		for _, s := range segs.GetSegments() {
			if s.GetSegment().GetNode() == "box-a" && s.GetSegment().GetDirectPut() {
				ep = s.GetSegment().GetEndpoint()
			}
		}
		return ep != ""
	})
	resp, err := ms.PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "att", Tenant: "default", Node: "box-a"})
	if err != nil || len(resp.GetTicket()) == 0 || resp.GetOpen() {
		t.Fatalf("ticket: %v %v", resp, err)
	}
	good := resp.GetTicket()
	other, err := ms.PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "att", Tenant: "default", Node: "box-b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "att", Node: "no-such-box"}); err == nil {
		t.Fatal("a ticket for an unknown node")
	}
	forged := bytes.Replace(bytes.Clone(good), []byte("default"), []byte("defaulx"), 1)
	eng, err := transfer.New(transfer.Config{DisableSharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	v := randomBytes(5, 4096)
	puts := []transfer.DirectPut{{Key: "evil", Size: uint64(len(v)), CRC32C: client.Checksum(v)}}
	for _, tc := range []struct {
		name, reason string
		tok          []byte
	}{
		{"unsigned", "unknown_key", grant.UnsignedTicket("box-a", "default", "att")},
		{"forged", "forged", forged},
		{"other node's", "unknown_key", other.GetTicket()},
		{"foreign key", "unknown_key", grant.SignTicket(grant.NewKey(12345), "box-a", "default", "att", time.Now().Add(time.Hour))},
		{"garbage", "malformed", []byte("not a ticket at all, but long enough to parse")},
	} {
		_, err := eng.PutDirect(ctx, ep, tc.tok, puts, [][]byte{v})
		if kverr.CodeOf(err) != kverr.PermissionDenied || !strings.Contains(err.Error(), tc.reason) {
			t.Fatalf("%s ticket: %v (want PERMISSION_DENIED, %s)", tc.name, err, tc.reason)
		}
	}
	if ok, err := ms.Exist(ctx, &kvtierpb.KeyRequest{Key: []byte("evil")}); err != nil || ok.GetExists() {
		t.Fatalf("refused puts stored something: %v %v", ok, err)
	}
	// The master re-checks: a ticket presented to it for another client
	// or tenant is refused, and so is a forged one.
	for _, r := range []*kvtierpb.PutStartRequest{
		{ClientId: "someone-else", Tenant: "default", Key: []byte("evil"), Size: 1, PutTicket: good},
		{ClientId: "att", Tenant: "other", Key: []byte("evil"), Size: 1, PutTicket: good},
		{ClientId: "att", Tenant: "default", Key: []byte("evil"), Size: 1, PutTicket: forged},
	} {
		if _, err := ms.PutStart(ctx, r); codeOf(err) != kverr.PermissionDenied {
			t.Fatalf("PutStart with a ticket for someone else: %v", err)
		}
	}
	// The valid ticket works, as its client, on its node.
	errs, err := eng.PutDirect(ctx, ep, good, puts, [][]byte{v})
	if err != nil || errs[0] != nil {
		t.Fatalf("valid ticket: %v %v", err, errs)
	}
	info, err := ms.GetObject(ctx, &kvtierpb.KeyRequest{Key: []byte("evil")})
	if err != nil || info.GetWriter() != "att" || info.GetReplicas()[0].GetNode() != "box-a" {
		t.Fatalf("put with a valid ticket: %v %v", info, err)
	}
}

// TestDirectPutCredentials: with --credentials the appliance places a
// client's direct put under the client's identity (its ticket), not its
// own: the object's tenant is the client's confined tenant and its writer
// the client's ID, which stays bound to the client's credential.
func TestDirectPutCredentials(t *testing.T) {
	dir := writeCreds(t)
	t.Run("master and appliance", func(t *testing.T) {
		c := startCluster(t, "--credentials", filepath.Join(dir, "creds"))
		c.appliance("box-a", "--token-file", filepath.Join(dir, "box1.tok"))
		directCredentials(t, c.grpc)
		// Clients of two tenants at once: coalesced calls keep each
		// put's tenant and writer.
		concurrentClients(t, c.grpc, func(i int, cfg *client.Config) {
			cfg.Token, cfg.Tenant = tokCliA, "A"
			if i%2 == 1 {
				cfg.Token, cfg.Tenant = tokCliB, "B"
			}
		})
	})
	t.Run("standalone", func(t *testing.T) { // the box places puts in-process
		p := start(t, "standalone", "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--dram", "64MiB",
			"--hugepages", "off", "--ssd-dir", "", "--offload", "off", "--credentials", filepath.Join(dir, "creds"))
		directCredentials(t, p.addrs["grpc"])
	})
}

func directCredentials(t *testing.T, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := tcpClient(t, addr, func(cfg *client.Config) { cfg.Token, cfg.Tenant, cfg.ClientID = tokCliA, "A", "client-a" })
	base := waitDirect(t, cl)
	v := randomBytes(3, 64<<10)
	if err := cl.Put(ctx, "cred/1", v); err != nil {
		t.Fatal(err)
	}
	keys, vals := []string{"cred/2", "cred/3"}, [][]byte{v[:100], v[:200]}
	for _, err := range cl.BatchPut(ctx, keys, vals) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := cl.Engine().Stats().DirectPuts - base; n != 3 {
		t.Fatalf("%d puts went direct, want 3", n)
	}
	info, err := cl.Stat(ctx, "cred/1")
	if err != nil || info.GetWriter() != "client-a" || info.GetTenant() != "A" {
		t.Fatalf("stat: %+v %v", info, err)
	}
	got, err := cl.Get(ctx, "cred/3")
	if err != nil || !bytes.Equal(got, vals[1]) {
		t.Fatalf("get: %v", err)
	}
	// Client B cannot see them; its ID cannot be A's.
	b := tcpClient(t, addr, func(cfg *client.Config) { cfg.Token, cfg.Tenant, cfg.ClientID = tokCliB, "B", "client-b" })
	if ok, err := b.Exist(ctx, "cred/1"); err != nil || ok {
		t.Fatalf("tenant B sees A's key: %v %v", ok, err)
	}
	if err := b.Put(ctx, "cred/b", v[:10]); err != nil {
		t.Fatal(err)
	}
}

// TestDirectPutSurvivesMasterRestart: a direct put is acknowledged only
// once the box holding it recorded it in its DRAM directory (the box
// confirms that itself; PutEnd does not wait for it to travel back to the
// master), so a master killed right after the last put returned is
// rebuilt with every one of them; removed keys stay removed; after the
// restart puts go on (the old master's tickets refused, new ones fetched).
func TestDirectPutSurvivesMasterRestart(t *testing.T) {
	addr := freePort(t)
	args := append([]string{"master", "--grpc-addr", addr, "--http-addr", "127.0.0.1:0", "--offload", "off"}, fastMasterArgs...)
	m := start(t, "master", args...)
	c := &cluster{t: t, master: m, grpc: addr}
	c.appliance("dp-a", "--offload", "off")
	cl := tcpClient(t, addr, nil)
	ctx := context.Background()
	base := waitDirect(t, cl)
	want := map[string][]byte{}
	for i := range 200 {
		k, v := rebuildValue("dp", i)
		if err := cl.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	var gone []string
	for i := 0; i < 200; i += 10 {
		k, _ := rebuildValue("dp", i)
		if err := cl.Remove(ctx, k, true); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
		gone = append(gone, k)
	}
	keys, vals := make([]string, 32), make([][]byte, 32)
	for i := range keys {
		keys[i], vals[i] = rebuildValue("dpb", i)
		want[keys[i]] = vals[i]
	}
	for _, err := range cl.BatchPut(ctx, keys, vals) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := cl.Engine().Stats().DirectPuts - base; n != 200+32 {
		t.Fatalf("%d puts went direct, want %d", n, 200+32)
	}
	m.kill() // no pause: whatever was acknowledged must be in the box's directory
	m2 := start(t, "master-restarted", args...)
	eventually(t, 20*time.Second, "restarted master ready", func() bool {
		code, _ := readyBody(m2.addrs["http"])
		return code == 200
	})
	checkAll(t, cl, want, gone)
	// Puts go on after the restart.
	for i := 1000; i < 1020; i++ {
		k, v := rebuildValue("dp", i)
		if err := cl.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	checkAll(t, cl, want, gone)
}

// TestDirectPutTicketExpiry: with one-second tickets (--put-ticket-life),
// an expired ticket is refused by the appliance's data port over TCP
// ("expired", nothing stored), while a client putting for three ticket
// lives keeps every put direct: it renews its ticket in the background
// before it expires.
func TestDirectPutTicketExpiry(t *testing.T) {
	c := startCluster(t, "--put-ticket-life", "1s")
	c.appliance("box-a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := tcpClient(t, c.grpc, nil)
	var ep string
	eventually(t, 10*time.Second, "box-a takes direct puts", func() bool {
		segs, err := cl.Master().ListSegments(ctx, &kvtierpb.Empty{})
		if err == nil && len(segs.GetSegments()) == 1 && segs.GetSegments()[0].GetSegment().GetDirectPut() {
			ep = segs.GetSegments()[0].GetSegment().GetEndpoint()
		}
		return ep != ""
	})
	resp, err := cl.Master().PutTicket(ctx, &kvtierpb.PutTicketRequest{ClientId: "late", Tenant: "default", Node: "box-a"})
	if err != nil {
		t.Fatal(err)
	}
	if life := time.Until(time.UnixMilli(resp.GetExpiryMs())); life > 1100*time.Millisecond || life < 500*time.Millisecond {
		t.Fatalf("ticket life %v, want about 1s", life)
	}
	eng, err := transfer.New(transfer.Config{DisableSharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	v := randomBytes(1, 1000)
	puts := []transfer.DirectPut{{Key: "late", Size: uint64(len(v)), CRC32C: client.Checksum(v)}}
	time.Sleep(time.Until(time.UnixMilli(resp.GetExpiryMs())) + 50*time.Millisecond)
	_, err = eng.PutDirect(ctx, ep, resp.GetTicket(), puts, [][]byte{v})
	if kverr.CodeOf(err) != kverr.PermissionDenied || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired ticket: %v", err)
	}
	if ok, err := cl.Exist(ctx, "late"); err != nil || ok {
		t.Fatalf("an expired ticket stored something: %v %v", ok, err)
	}
	base := waitDirect(t, cl)
	n := 0
	for start := time.Now(); time.Since(start) < 3*time.Second; n++ {
		if err := cl.Put(ctx, fmt.Sprintf("renew/%d", n), v); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := cl.Engine().Stats().DirectPuts - base; got != uint64(n) {
		t.Fatalf("%d of %d puts went direct across three ticket lives", got, n)
	}
}

// TestDirectPutsSpreadAcrossBoxes: clients that each put once (the CLI's
// one-shot clients, a fleet of short-lived engine workers) spread their
// direct puts over the appliances. Every client's round robin used to
// start at the same place, so every first put went to the same box.
func TestDirectPutsSpreadAcrossBoxes(t *testing.T) {
	ip := startInproc(t, master.Config{})
	ip.appliance(t, appliance.Config{Name: "box-a"})
	ip.appliance(t, appliance.Config{Name: "box-b"})
	warm := tcpClient(t, ip.addr, nil)
	// Both boxes take direct puts (each has reported its DRAM directory):
	// a long-lived client's round robin has put directly several times.
	before := waitDirect(t, warm)
	eventually(t, 10*time.Second, "direct puts on both boxes", func() bool {
		waitDirect(t, warm)
		return warm.Engine().Stats().DirectPuts >= before+4
	})
	const clients = 24
	per := map[string]int{}
	for i := range clients {
		c := tcpClient(t, ip.addr, func(cfg *client.Config) { cfg.OneShot = true })
		key := fmt.Sprintf("spread/%d", i)
		if err := c.Put(context.Background(), key, bytes.Repeat([]byte{byte(i)}, 4096)); err != nil {
			t.Fatal(err)
		}
		if n := c.Engine().Stats().DirectPuts; n != 1 {
			t.Fatalf("client %d: %d direct puts, want its one put direct", i, n)
		}
		info, err := c.Stat(context.Background(), key)
		if err != nil || len(info.Replicas) != 1 {
			t.Fatalf("stat %s: %+v, %v", key, info, err)
		}
		per[info.Replicas[0].Node]++
		c.Close()
	}
	if per["box-a"] == 0 || per["box-b"] == 0 {
		t.Fatalf("first puts of %d clients by box: %v, want both boxes used", clients, per)
	}
	t.Logf("first puts of %d clients by box: %v", clients, per)
}

// TestSmallPutsGoDirectOnTheBoxHost: a client on the appliance's host
// (shared memory mapped) sends small single puts direct over TCP (one
// round trip, against two master calls around a copy): up to 128 KiB to a
// box whose master is in its own process (a standalone), up to 16 KiB to
// one whose master is elsewhere; larger puts and batches go through
// shared memory. Everything reads back.
func TestSmallPutsGoDirectOnTheBoxHost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		local bool
		puts  []routedPut
	}{
		{"standalone", true, []routedPut{{4 << 10, false, true}, {128 << 10, false, true}, {128<<10 + 1, false, false}, {1 << 20, false, false}, {4 << 10, true, false}}},
		{"remote-master", false, []routedPut{{4 << 10, false, true}, {16 << 10, false, true}, {16<<10 + 1, false, false}, {128 << 10, false, false}, {4 << 10, true, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ip := startInproc(t, master.Config{})
			cfg := appliance.Config{Name: "box"}
			if tc.local {
				cfg.PutMaster = master.NewGRPCServer(ip.m)
				cfg.DramRecords = func(ctx context.Context) (appliance.DramRecordsStream, error) { return ip.m.OpenDramRecords(ctx), nil }
			}
			ip.appliance(t, cfg)
			c := ip.client(t)
			checkSmallPutsDirect(t, c, tc.puts)
		})
	}
}

// routedPut is a put of size bytes (batch: two such values in one
// BatchPut) and whether it should go direct.
type routedPut struct {
	size   int
	batch  bool
	direct bool
}

func checkSmallPutsDirect(t *testing.T, c *client.Client, puts []routedPut) {
	t.Helper()
	ctx := context.Background()
	// Segments mapped (first contact maps them in the background) and the
	// box taking direct puts (it reported its DRAM directory).
	n := 0
	eventually(t, 10*time.Second, "a large put through shared memory", func() bool {
		n++
		was := c.Engine().Stats().SharedRequests
		if err := c.Put(ctx, fmt.Sprintf("warm/%d", n), make([]byte, 256<<10)); err != nil {
			t.Fatal(err)
		}
		return c.Engine().Stats().SharedRequests > was
	})
	waitDirect(t, c)
	for _, p := range puts {
		st := c.Engine().Stats()
		key := fmt.Sprintf("route/%d/%v", p.size, p.batch)
		v := randomBytes(uint64(p.size), p.size)
		if p.batch {
			if errs := c.BatchPut(ctx, []string{key, key + "/2"}, [][]byte{v, v}); errs[0] != nil || errs[1] != nil {
				t.Fatalf("BatchPut %s: %v", key, errs)
			}
		} else if err := c.Put(ctx, key, v); err != nil {
			t.Fatalf("Put %s: %v", key, err)
		}
		after := c.Engine().Stats()
		direct, shm := after.DirectPuts-st.DirectPuts, after.SharedRequests-st.SharedRequests
		if p.direct && (direct != 1 || shm != 0) || !p.direct && (direct != 0 || shm == 0) {
			t.Fatalf("%s: %d direct puts, %d shared-memory requests; want direct %v", key, direct, shm, p.direct)
		}
		if got, err := c.Get(ctx, key); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("Get %s: %d bytes, %v", key, len(got), err)
		}
	}
}
