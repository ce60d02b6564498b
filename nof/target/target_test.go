package target_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/target"
)

func TestConnectIdentify(t *testing.T) {
	tg, addr := newTarget(t, target.Config{}, target.Subsystem{Serial: "KVT0001", Model: "kvtier test"})
	c := dial(t, addr, initiator.Config{IOQueues: 2})
	id := c.Identify()
	if id.SubNQN != subNQN || id.Serial != "KVT0001" || id.Model != "kvtier test" || id.NN != 2 || id.CtrlType != nvme.CtrlTypeIO {
		t.Fatalf("identify %+v", id)
	}
	if id.MDTS != 5 || id.IOCCSZ != 260 || id.SQES != 0x66 || id.CQES != 0x44 || id.CTRATT&1 == 0 || id.CNTLID != c.CNTLID() {
		t.Fatalf("identify limits %+v", id)
	}
	nss := c.Namespaces()
	if len(nss) != 2 || nss[0].Size() != 1<<20 || nss[0].BlockSize != 512 || nss[1].Size() != 4<<20 || nss[1].BlockSize != 4096 {
		t.Fatalf("namespaces %+v", nss)
	}
	if nss[0].NGUID == nss[1].NGUID || nss[0].NGUID == ([16]byte{}) {
		t.Fatalf("NGUIDs not distinct: %x %x", nss[0].NGUID, nss[1].NGUID)
	}
	st := tg.Stats()
	if len(st.Hosts) != 1 || st.Hosts[0].HostNQN != hostNQN || st.Hosts[0].IOQueues != 2 || st.Hosts[0].SubNQN != subNQN {
		t.Fatalf("stats hosts %+v", st.Hosts)
	}
	// A second host gets another CNTLID.
	c2 := dial(t, addr, initiator.Config{HostNQN: "nqn.2026-11.io.kvtier:host-b"})
	if c2.CNTLID() == c.CNTLID() {
		t.Fatal("two controllers share a CNTLID")
	}
	c2.Close()
	c.Close()
	waitFor(t, func() bool { return len(tg.Stats().Hosts) == 0 }, "hosts to disconnect")
}

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDiscovery(t *testing.T) {
	tg, addr := newTarget(t, target.Config{}, target.Subsystem{})
	mem, _ := namespace.NewMemory(make([]byte, 64<<10), 512)
	if err := tg.AddSubsystem(target.Subsystem{NQN: "nqn.2026-11.io.kvtier:private", AllowHosts: []string{"nqn.2026-11.io.kvtier:other"},
		Namespaces: []namespace.Namespace{mem}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	entries, err := initiator.Discover(ctx, addr, hostNQN)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("entries %+v (the private subsystem must be hidden from this host)", entries)
	}
	e := entries[0]
	if e.SubNQN != subNQN || e.TrType != 3 || e.AdrFam != 1 || e.SubType != 2 || e.CNTLID != 0xFFFF || e.TrAddr != "127.0.0.1" || "127.0.0.1:"+e.TrSvcID != addr {
		t.Fatalf("entry %+v", e)
	}
	other, err := initiator.Discover(ctx, addr, "nqn.2026-11.io.kvtier:other")
	if err != nil || len(other) != 2 {
		t.Fatalf("allowed host sees %d entries, err %v", len(other), err)
	}
	if err := tg.AddSubsystem(target.Subsystem{NQN: subNQN, Namespaces: []namespace.Namespace{mem}}); !kverr.Is(err, kverr.ObjectAlreadyExists) {
		t.Fatalf("duplicate subsystem: %v", err)
	}
}

// TestRandomIO does 4 KiB random writes then reads at QD 32 on both
// namespaces, with and without digests, against a shadow copy.
func TestRandomIO(t *testing.T) {
	for _, dg := range []struct{ hd, dd bool }{{false, false}, {true, true}, {true, false}} {
		t.Run(map[bool]string{true: "hdgst", false: "nohdgst"}[dg.hd]+"-"+map[bool]string{true: "ddgst", false: "noddgst"}[dg.dd], func(t *testing.T) {
			tg, addr := newTarget(t, target.Config{}, target.Subsystem{})
			c := dial(t, addr, initiator.Config{IOQueues: 2, QueueDepth: 32, HeaderDigest: dg.hd, DataDigest: dg.dd})
			for _, ns := range c.Namespaces() {
				randomIO(t, c, ns, 32, 400)
			}
			st := tg.Stats().Subsystems[0].Namespaces
			if st[0].WriteOps != 400 || st[0].ReadOps != 400 || st[0].ReadBytes != 400*4096 {
				t.Fatalf("stats %+v", st[0])
			}
		})
	}
}

func randomIO(t *testing.T, c *initiator.Controller, ns initiator.Namespace, qd, n int) {
	ctx := context.Background()
	const bs = 4096
	slots := int(ns.Size() / bs)
	shadow := make([][]byte, slots)
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	errc := make(chan error, qd)
	for w := 0; w < qd; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				slot := i % slots
				p := make([]byte, bs)
				for k := range p {
					p[k] = byte(i*7 + k)
				}
				mu.Lock() // one writer per slot at a time keeps the shadow exact
				if err := c.WriteAt(ctx, ns.NSID, p, int64(slot*bs)); err != nil {
					mu.Unlock()
					errc <- err
					return
				}
				shadow[slot] = p
				mu.Unlock()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < n; i++ {
		work <- rng.IntN(1 << 20)
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	sem := make(chan struct{}, qd)
	var rerr error
	for i := 0; i < n; i++ {
		slot := rng.IntN(slots)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			got := make([]byte, bs)
			if err := c.ReadAt(ctx, ns.NSID, got, int64(slot*bs)); err != nil {
				mu.Lock()
				rerr = err
				mu.Unlock()
				return
			}
			want := shadow[slot]
			if want == nil {
				want = make([]byte, bs)
			}
			if !bytes.Equal(got, want) {
				mu.Lock()
				rerr = errors.New("read data differs from what was written")
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if rerr != nil {
		t.Fatal(rerr)
	}
}

func TestLargeWritesAndOtherCommands(t *testing.T) {
	tg, addr := newTarget(t, target.Config{}, target.Subsystem{})
	c := dial(t, addr, initiator.Config{})
	ctx := context.Background()
	for _, nsid := range []uint32{1, 2} {
		big := make([]byte, 512<<10) // 4 × 128 KiB commands via R2T
		for i := range big {
			big[i] = byte(i*13 + int(nsid))
		}
		if err := c.WriteAt(ctx, nsid, big, 64<<10); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(big))
		if err := c.ReadAt(ctx, nsid, got, 64<<10); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("nsid %d: 512 KiB read back differs (%v)", nsid, err)
		}
		if err := c.Flush(ctx, nsid); err != nil {
			t.Fatal(err)
		}
		if err := c.WriteZeroes(ctx, nsid, 64<<10, 8192); err != nil {
			t.Fatal(err)
		}
		if err := c.Deallocate(ctx, nsid, 128<<10, 16384); err != nil {
			t.Fatal(err)
		}
		if err := c.ReadAt(ctx, nsid, got, 64<<10); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:8192], make([]byte, 8192)) || !bytes.Equal(got[64<<10:80<<10], make([]byte, 16384)) || !bytes.Equal(got[8192:64<<10], big[8192:64<<10]) {
			t.Fatalf("nsid %d: zeroed/deallocated ranges wrong", nsid)
		}
	}
	st := tg.Stats().Subsystems[0].Namespaces[0]
	if st.WriteOps != 4 || st.WriteBytes != 512<<10 || st.OtherOps != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Out of range and bad arguments.
	err := c.ReadAt(ctx, 1, make([]byte, 4096), 1<<20)
	if !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("read past end: %v", err)
	}
	if err := c.ReadAt(ctx, 9, make([]byte, 512), 0); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("unknown namespace: %v", err)
	}
}

func TestConnectRefusals(t *testing.T) {
	_, addr := newTarget(t, target.Config{}, target.Subsystem{AllowHosts: []string{hostNQN}})
	ctx := context.Background()
	_, err := initiator.Dial(ctx, addr, initiator.Config{SubNQN: "nqn.2026-11.io.kvtier:nope", HostNQN: hostNQN})
	var se *nvme.StatusError
	if !errors.As(err, &se) || se.SCT != 1 || se.SC != nvme.SCConnectInvalidParam || se.DW0 != 1<<16|256 || !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("wrong subnqn: %v", err)
	}
	_, err = initiator.Dial(ctx, addr, initiator.Config{SubNQN: subNQN, HostNQN: "nqn.2026-11.io.kvtier:intruder"})
	if !errors.As(err, &se) || se.SCT != 1 || se.SC != nvme.SCConnectInvalidHost || !kverr.Is(err, kverr.Unauthorized) {
		t.Fatalf("host not allowed: %v", err)
	}
	// I/O queue naming a CNTLID that does not exist.
	h := dialRaw(t, addr, false, false)
	cpl := h.connect(1, 77, subNQN, hostNQN, 0)
	if cpl.SCT() != 1 || cpl.SC() != nvme.SCConnectInvalidParam || cpl.DW0 != 1<<16|16 {
		t.Fatalf("bad cntlid: %+v", cpl)
	}
	// Commands before Connect are sequence errors.
	h2 := dialRaw(t, addr, false, false)
	h2.send(identifyCmd(1, 0))
	if cpl := h2.resp(); cpl.SCT() != 0 || cpl.SC() != nvme.SCSequenceError {
		t.Fatalf("identify before connect: %+v", cpl)
	}
}

func TestKeepAliveExpiry(t *testing.T) {
	fc := newFakeClock()
	tg, addr := newTarget(t, target.Config{Clock: fc, KeepAliveCheck: 5 * time.Millisecond}, target.Subsystem{})
	c := dial(t, addr, initiator.Config{KeepAlive: time.Hour}) // our keep-alives would come only after 30 min
	ctx := context.Background()
	if err := c.ReadAt(ctx, 1, make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	other := dial(t, addr, initiator.Config{HostNQN: "nqn.2026-11.io.kvtier:host-b", KeepAlive: -1}) // KATO 0: never expires
	fc.Advance(2 * time.Hour)
	waitFor(t, func() bool { return len(tg.Stats().Hosts) == 1 }, "the silent controller to be torn down")
	if err := c.ReadAt(ctx, 1, make([]byte, 512), 0); !kverr.Is(err, kverr.TransferFail) {
		t.Fatalf("read after keep-alive expiry: %v", err)
	}
	if err := other.ReadAt(ctx, 1, make([]byte, 512), 0); err != nil {
		t.Fatalf("other host: %v", err)
	}
	if err := c.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ReadAt(ctx, 1, make([]byte, 512), 0); err != nil {
		t.Fatalf("after reconnect: %v", err)
	}
}

func TestSubsystemManagement(t *testing.T) {
	tg, addr := newTarget(t, target.Config{}, target.Subsystem{})
	mem, _ := namespace.NewMemory(make([]byte, 64<<10), 512)
	bad := []target.Subsystem{
		{NQN: "not-an-nqn", Namespaces: []namespace.Namespace{mem}},
		{NQN: nvme.DiscoveryNQN, Namespaces: []namespace.Namespace{mem}},
		{NQN: "nqn.2026-11.io.kvtier:empty"},
		{NQN: "nqn.2026-11.io.kvtier:serial", Serial: "012345678901234567890", Namespaces: []namespace.Namespace{mem}},
		{NQN: "nqn.2026-11.io.kvtier:nilns", Namespaces: []namespace.Namespace{nil}},
	}
	for _, s := range bad {
		if err := tg.AddSubsystem(s); !kverr.Is(err, kverr.InvalidParams) {
			t.Fatalf("%+v accepted: %v", s.NQN, err)
		}
	}
	if _, err := target.New(target.Config{MaxQueueDepth: 1}); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("bad config accepted: %v", err)
	}
	c := dial(t, addr, initiator.Config{})
	if err := tg.RemoveSubsystem(subNQN); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(tg.Stats().Hosts) == 0 }, "controllers of the removed subsystem to go")
	if err := c.ReadAt(context.Background(), 1, make([]byte, 512), 0); !kverr.Is(err, kverr.TransferFail) {
		t.Fatalf("read from a removed subsystem: %v", err)
	}
	if err := tg.RemoveSubsystem(subNQN); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if entries, err := initiator.Discover(context.Background(), addr, hostNQN); err != nil || len(entries) != 0 {
		t.Fatalf("discovery after removal: %+v %v", entries, err)
	}
}
