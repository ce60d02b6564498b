package appliance_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
	"github.com/kvtier/kvtier/nof/spdk"
	"github.com/kvtier/kvtier/nof/spdk/spdktest"
)

const gpuHost = "nqn.2026-11.io.kvtier:gpu-1"

// startMaster runs a real master on a loopback gRPC server and returns its
// address and a MasterClient for assertions.
func startMaster(t *testing.T) (string, kvtierpb.MasterClient) {
	t.Helper()
	return startMasterCfg(t, master.Config{})
}

// startFake serves a FakeSPDK (a named fake: no SPDK can run here) on a real
// Unix socket, and returns a client of its own for inspecting SPDK's state.
func startFake(t *testing.T) (*spdktest.FakeSPDK, string, *spdk.Client) {
	t.Helper()
	f := spdktest.NewFake()
	srv, err := spdktest.Listen(filepath.Join(t.TempDir(), "spdk.sock"), f.Handle, spdktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := spdk.New(spdk.Config{Socket: srv.Path()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	return f, srv.Path(), c
}

// spdkConfig: one aio file (created by the appliance at 16 MiB), a 64 MiB
// malloc disk carrying an lvol store, and two lvols. Exports: the aio bdev
// and the two lvols (the lvstore's base is not exported).
func spdkConfig(t *testing.T, name, masterAddr, sock string, logs io.Writer) appliance.Config {
	return appliance.Config{
		Name: name, MasterAddr: masterAddr, DRAM: 8 << 20, Hugepages: dram.HugepageOff,
		HeartbeatInterval: 100 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		NVMe: appliance.NVMeConfig{
			Backend:    appliance.BackendSPDK,
			Addr:       "127.0.0.1:4420",
			Namespaces: []appliance.NVMeNamespace{{Path: filepath.Join(t.TempDir(), "ns1.img"), Size: 16 << 20}},
			AllowHosts: []string{gpuHost},
			SPDK: appliance.SPDKConfig{
				Socket:  sock,
				Mallocs: []spdk.MallocSpec{{Name: "Malloc0", Size: 64 << 20}},
				Lvstore: &spdk.LvstoreSpec{Name: "lvs0", BaseBdev: "Malloc0", ClusterSize: 1 << 20},
				Lvols:   []spdk.LvolSpec{{Name: "vol0", SizeMiB: 16, Thin: true}, {Name: "vol1", SizeMiB: 8}},
			},
		},
	}
}

// nofSegments lists the mounted NOF segments of node, by name.
func nofSegments(t *testing.T, mc kvtierpb.MasterClient, node string) map[string]*kvtierpb.Segment {
	t.Helper()
	resp, err := mc.ListSegments(context.Background(), &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*kvtierpb.Segment{}
	for _, si := range resp.Segments {
		s := si.Segment
		if s.Type == kvtierpb.ReplicaType_NOF && s.Node == node && si.State == kvtierpb.SegmentState_MOUNTED {
			out[s.Name] = s
		}
	}
	return out
}

func subsystem(t *testing.T, c *spdk.Client, nqn string) (spdk.Subsystem, bool) {
	t.Helper()
	subs, err := c.NvmfGetSubsystems(context.Background(), spdk.NvmfGetSubsystemsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if s.Nqn == nqn {
			return s, true
		}
	}
	return spdk.Subsystem{}, false
}

// TestSPDKBackendExportsMountsAndIsIdempotent drives the whole SPDK mode:
// the plan lands in SPDK, every namespace is a NOF segment on a real master,
// Close unmounts them and leaves SPDK exporting, a second start changes
// nothing in SPDK, and SPDKTeardown removes what the plan made.
func TestSPDKBackendExportsMountsAndIsIdempotent(t *testing.T) {
	ctx := context.Background()
	masterAddr, mc := startMaster(t)
	fake, sock, sc := startFake(t)
	var logs syncBuffer // read here while the appliance logs
	cfg := spdkConfig(t, "box-1", masterAddr, sock, &logs)
	nqn := appliance.SubsystemNQN("box-1")

	a, err := appliance.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(ctx) })
	if a.NVMeNQN() != nqn || a.NVMeAddr() != "127.0.0.1:4420" {
		t.Fatalf("NVMeNQN/NVMeAddr = %q %q", a.NVMeNQN(), a.NVMeAddr())
	}
	if _, ok := a.NVMeStats(); ok {
		t.Fatal("NVMeStats reports a built-in target in SPDK mode")
	}

	// SPDK's side: subsystem with the host, listener and three namespaces.
	sub, ok := subsystem(t, sc, nqn)
	if !ok {
		t.Fatalf("SPDK has no subsystem %s", nqn)
	}
	if sub.AllowAnyHost || len(sub.Hosts) != 1 || sub.Hosts[0].Nqn != gpuHost {
		t.Fatalf("hosts: allow_any=%v %+v", sub.AllowAnyHost, sub.Hosts)
	}
	if len(sub.ListenAddresses) != 1 || sub.ListenAddresses[0].Traddr != "127.0.0.1" ||
		sub.ListenAddresses[0].Trsvcid != "4420" || !strings.EqualFold(sub.ListenAddresses[0].Trtype, "tcp") {
		t.Fatalf("listeners: %+v", sub.ListenAddresses)
	}
	if len(sub.Namespaces) != 3 {
		t.Fatalf("SPDK namespaces: %+v, want aio + 2 lvols", sub.Namespaces)
	}
	if !strings.HasPrefix(sub.SerialNumber, "KVTbox-1") || sub.ModelNumber != "kvtier appliance" {
		t.Fatalf("serial %q model %q", sub.SerialNumber, sub.ModelNumber)
	}
	if fake.Calls("bdev_aio_create") != 1 || fake.Calls("bdev_lvol_create") != 2 || fake.Calls("nvmf_subsystem_add_listener") != 1 {
		t.Fatalf("calls: aio %d lvol %d listener %d", fake.Calls("bdev_aio_create"), fake.Calls("bdev_lvol_create"),
			fake.Calls("nvmf_subsystem_add_listener"))
	}

	// The master's side: one NOF segment per SPDK namespace.
	segs := nofSegments(t, mc, "box-1")
	wantSize := map[string]uint64{}
	for _, ns := range sub.Namespaces {
		b, err := sc.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: ns.BdevName})
		if err != nil || len(b) != 1 {
			t.Fatalf("bdev %s: %v", ns.BdevName, err)
		}
		wantSize[segName("box-1", ns.Nsid)] = b[0].Size()
	}
	if len(segs) != 3 {
		t.Fatalf("master NOF segments %v, want 3", keys(segs))
	}
	var sizes []uint64
	for name, s := range segs {
		if s.Nqn != nqn || s.TargetAddr != "127.0.0.1:4420" || s.BlockSize != 4096 || name != segName("box-1", s.Nsid) {
			t.Fatalf("segment %s: %+v", name, s)
		}
		if want, ok := wantSize[name]; !ok || s.Size != want {
			t.Fatalf("segment %s size %d, SPDK bdev size %d (known %v)", name, s.Size, want, ok)
		}
		sizes = append(sizes, s.Size)
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []uint64{8 << 20, 16 << 20, 16 << 20}) {
		t.Fatalf("segment sizes %v, want aio 16 MiB, lvols 16 and 8 MiB", sizes)
	}

	// I/O figures: one entry per exported namespace, and logged at debug.
	io, err := a.SPDKIOStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(io) != 3 {
		t.Fatalf("SPDKIOStat: %+v", io)
	}
	for _, s := range io {
		if _, ok := segs[s.Segment]; !ok || s.Name != s.Bdev || s.TickRate == 0 {
			t.Fatalf("iostat entry %+v does not match a mounted segment", s)
		}
	}
	if !strings.Contains(logs.String(), "spdk iostat") {
		t.Fatalf("no debug iostat line in logs:\n%s", logs.String())
	}
	// The heartbeat carries them to the master (REST /api/v1/nvme, web UI).
	var nv *kvtierpb.NvmeStats
	for deadline := time.Now().Add(10 * time.Second); nv == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		cl, err := mc.ListClients(ctx, &kvtierpb.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cl.Clients {
			if c.ClientId == "box-1" && c.Nvme != nil {
				nv = c.Nvme
			}
		}
	}
	if nv == nil || nv.Addr != "127.0.0.1:4420" || len(nv.Subsystems) != 1 || nv.Subsystems[0].Nqn != nqn || len(nv.Subsystems[0].Namespaces) != 3 {
		t.Fatalf("master's NVMe view of box-1: %v", nv)
	}
	for _, ns := range nv.Subsystems[0].Namespaces {
		if s, ok := segs[segName("box-1", ns.Nsid)]; !ok || ns.Size != s.Size || ns.BlockSize != 4096 {
			t.Fatalf("namespace %v does not match its segment %v", ns, s)
		}
	}

	// Close unmounts the segments and leaves SPDK exporting.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if segs := nofSegments(t, mc, "box-1"); len(segs) != 0 {
		t.Fatalf("after Close the master still lists %v", keys(segs))
	}
	if _, ok := subsystem(t, sc, nqn); !ok {
		t.Fatal("Close without Teardown removed the SPDK subsystem")
	}

	// A second start against the same SPDK changes nothing there.
	before := fake.MutatingCalls()
	a2, err := appliance.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := fake.MutatingCalls(); got != before {
		t.Fatalf("second start made %d mutating SPDK calls", got-before)
	}
	if segs2 := nofSegments(t, mc, "box-1"); len(segs2) != 3 {
		t.Fatalf("second start mounted %v", keys(segs2))
	}
	if err := a2.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Teardown removes the plan's objects from SPDK.
	if err := a2.SPDKTeardown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := subsystem(t, sc, nqn); ok {
		t.Fatal("subsystem survived SPDKTeardown")
	}
	if bs, err := sc.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{}); err != nil || len(bs) != 0 {
		t.Fatalf("bdevs after teardown: %d (err %v)", len(bs), err)
	}
	if _, err := os.Stat(cfg.NVMe.Namespaces[0].Path); err != nil {
		t.Fatalf("teardown must not delete the backing file: %v", err)
	}
}

// TestSPDKBackendRefusalMountsNothing: an SPDK error fails Start with an
// error naming the step and carrying SPDK's code; no NOF segment is left on
// the master; a retry converges.
func TestSPDKBackendRefusalMountsNothing(t *testing.T) {
	ctx := context.Background()
	masterAddr, mc := startMaster(t)
	fake, sock, _ := startFake(t)
	cfg := spdkConfig(t, "box-2", masterAddr, sock, &bytes.Buffer{})
	fake.FailNext("nvmf_subsystem_add_ns", &spdk.RPCError{Code: spdk.CodeInvalidParams, Message: "Invalid parameters"})

	a, err := appliance.Start(ctx, cfg)
	if err == nil {
		a.Close(ctx)
		t.Fatal("Start succeeded although SPDK refused nvmf_subsystem_add_ns")
	}
	var re *spdk.RPCError
	if !errors.As(err, &re) || re.Code != spdk.CodeInvalidParams || !strings.Contains(err.Error(), "nvmf_subsystem_add_ns") ||
		!strings.Contains(err.Error(), sock) {
		t.Fatalf("error does not name the SPDK step, socket and code: %v", err)
	}
	if segs := nofSegments(t, mc, "box-2"); len(segs) != 0 {
		t.Fatalf("failed start left NOF segments %v", keys(segs))
	}

	a, err = appliance.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("retry after the refusal: %v", err)
	}
	defer a.Close(ctx)
	if segs := nofSegments(t, mc, "box-2"); len(segs) != 3 {
		t.Fatalf("retry mounted %v", keys(segs))
	}
}

// TestSPDKBackendMountRefusedRollsBack: when the master refuses one NOF
// segment (its name is taken by another node), Start fails and the segments
// mounted before it are withdrawn; the other node's segment is untouched.
func TestSPDKBackendMountRefusedRollsBack(t *testing.T) {
	ctx := context.Background()
	masterAddr, mc := startMaster(t)
	_, sock, _ := startFake(t)
	cfg := spdkConfig(t, "box-4", masterAddr, sock, &bytes.Buffer{})
	squat := &kvtierpb.Segment{Name: "box-4/spdk2", Type: kvtierpb.ReplicaType_NOF, Node: "squatter",
		Nqn: "nqn.2026-11.io.kvtier:other", TargetAddr: "127.0.0.1:4421", BlockSize: 4096, Size: 1 << 20}
	if _, err := mc.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: "squatter", Segment: squat}); err != nil {
		t.Fatal(err)
	}
	a, err := appliance.Start(ctx, cfg)
	if err == nil {
		a.Close(ctx)
		t.Fatal("Start succeeded although the master refused box-4/spdk2")
	}
	if !kverr.Is(err, kverr.SegmentAlreadyExists) || !strings.Contains(err.Error(), "box-4/spdk2") {
		t.Fatalf("error: %v", err)
	}
	if segs := nofSegments(t, mc, "box-4"); len(segs) != 0 {
		t.Fatalf("refused start left %v mounted", keys(segs))
	}
	if segs := nofSegments(t, mc, "squatter"); len(segs) != 1 || segs["box-4/spdk2"] == nil {
		t.Fatalf("the other node's segment was disturbed: %v", keys(segs))
	}
}

// TestSPDKBackendConflictLeavesOperatorObjects: an operator's bdev with a
// planned name but other attributes is not touched; Start fails with
// spdk.ErrConflict and mounts no NOF segment.
func TestSPDKBackendConflictLeavesOperatorObjects(t *testing.T) {
	ctx := context.Background()
	masterAddr, mc := startMaster(t)
	fake, sock, sc := startFake(t)
	if _, err := sc.BdevMallocCreate(ctx, spdk.BdevMallocCreateParams{Name: "Malloc0", NumBlocks: 1024, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	before := fake.MutatingCalls()
	a, err := appliance.Start(ctx, spdkConfig(t, "box-5", masterAddr, sock, &bytes.Buffer{}))
	if err == nil {
		a.Close(ctx)
		t.Fatal("Start reused a 4 MiB Malloc0 for a planned 64 MiB one")
	}
	if !errors.Is(err, spdk.ErrConflict) || !strings.Contains(err.Error(), "Malloc0") {
		t.Fatalf("want ErrConflict naming Malloc0, got %v", err)
	}
	if fake.Calls("bdev_malloc_delete") != 0 {
		t.Fatal("the operator's Malloc0 was deleted")
	}
	if b, err := sc.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: "Malloc0"}); err != nil || b[0].NumBlocks != 1024 {
		t.Fatalf("operator's Malloc0 changed: %+v %v", b, err)
	}
	if segs := nofSegments(t, mc, "box-5"); len(segs) != 0 {
		t.Fatalf("conflicting start mounted %v", keys(segs))
	}
	t.Logf("mutating calls before the conflict was found: %d", fake.MutatingCalls()-before)
}

// TestSPDKBackendBadConfig: config SPDK cannot use is refused before any
// SPDK call, with kverr.InvalidParams; a missing socket is a clear error.
func TestSPDKBackendBadConfig(t *testing.T) {
	ctx := context.Background()
	masterAddr, _ := startMaster(t)
	fake, sock, _ := startFake(t)
	for _, tc := range []struct {
		name string
		mod  func(*appliance.NVMeConfig)
	}{
		{"no addr", func(c *appliance.NVMeConfig) { c.Addr = "" }},
		{"wildcard host", func(c *appliance.NVMeConfig) { c.Addr = "0.0.0.0:4420" }},
		{"port 0", func(c *appliance.NVMeConfig) { c.Addr = "127.0.0.1:0" }},
		{"bad host nqn", func(c *appliance.NVMeConfig) { c.AllowHosts = []string{"gpu-1"} }},
		{"lvols without lvstore", func(c *appliance.NVMeConfig) { c.SPDK.Lvstore = nil }},
		{"unknown backend", func(c *appliance.NVMeConfig) { c.Backend = "kernel" }},
		{"unaligned namespace", func(c *appliance.NVMeConfig) { c.Namespaces[0].Size = 1000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := spdkConfig(t, "box-3", masterAddr, sock, &bytes.Buffer{})
			tc.mod(&cfg.NVMe)
			a, err := appliance.Start(ctx, cfg)
			if err == nil {
				a.Close(ctx)
				t.Fatal("accepted")
			}
			if !kverr.Is(err, kverr.InvalidParams) {
				t.Fatalf("want InvalidParams, got %v", err)
			}
		})
	}
	if n := fake.MutatingCalls(); n != 0 {
		t.Fatalf("bad configs made %d mutating SPDK calls", n)
	}

	cfg := spdkConfig(t, "box-3", masterAddr, filepath.Join(t.TempDir(), "no-spdk.sock"), &bytes.Buffer{})
	if _, err := appliance.Start(ctx, cfg); err == nil || !strings.Contains(err.Error(), "is nvmf_tgt/spdk_tgt running?") {
		t.Fatalf("missing socket: %v", err)
	}
}

func segName(node string, nsid uint32) string {
	return node + "/spdk" + strconv.FormatUint(uint64(nsid), 10)
}

func keys(m map[string]*kvtierpb.Segment) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sizeOf is a small size parser like cmd/kvtier's: N, NKiB, NMiB, NGiB.
func sizeOf(s string) (uint64, error) {
	mult := uint64(1)
	for suf, m := range map[string]uint64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if strings.HasSuffix(s, suf) {
			s, mult = strings.TrimSuffix(s, suf), m
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, err
	}
	return n * mult, nil
}

func TestParseSPDKFlags(t *testing.T) {
	c, err := appliance.ParseSPDKController("Nvme0=0000:5e:00.0")
	if err != nil || c != (spdk.ControllerSpec{Name: "Nvme0", Trtype: "pcie", Traddr: "0000:5e:00.0"}) {
		t.Fatalf("pcie: %+v %v", c, err)
	}
	c, err = appliance.ParseSPDKController("Remote1=[fd00::5]:4420/nqn.2026-11.io.kvtier:remote")
	if err != nil || c != (spdk.ControllerSpec{Name: "Remote1", Trtype: "tcp", Traddr: "fd00::5", Adrfam: "ipv6",
		Trsvcid: "4420", Subnqn: "nqn.2026-11.io.kvtier:remote"}) {
		t.Fatalf("tcp: %+v %v", c, err)
	}
	for _, bad := range []string{"", "Nvme0", "=0000:5e:00.0", "Nvme0=5e:00", "Nvme0=10.0.0.1:4420",
		"Nvme0=10.0.0.1:0/nqn.2026-11.io.x:y", "Nvme0=10.0.0.1:4420/not-an-nqn", "bad name=0000:5e:00.0"} {
		if _, err := appliance.ParseSPDKController(bad); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("controller %q: want InvalidParams, got %v", bad, err)
		}
	}
	m, err := appliance.ParseSPDKMalloc("Malloc0:64MiB", sizeOf)
	if err != nil || m != (spdk.MallocSpec{Name: "Malloc0", Size: 64 << 20}) {
		t.Fatalf("malloc: %+v %v", m, err)
	}
	l, err := appliance.ParseSPDKLvstore("lvs0=Nvme0n1:1MiB", sizeOf)
	if err != nil || *l != (spdk.LvstoreSpec{Name: "lvs0", BaseBdev: "Nvme0n1", ClusterSize: 1 << 20}) {
		t.Fatalf("lvstore: %+v %v", l, err)
	}
	v, err := appliance.ParseSPDKLvol("vol0:2GiB:thin", sizeOf)
	if err != nil || v != (spdk.LvolSpec{Name: "vol0", SizeMiB: 2048, Thin: true}) {
		t.Fatalf("lvol: %+v %v", v, err)
	}
	for _, bad := range []string{"", "x", "x:", "x:100", "x:0", ":4MiB", "x:4MiB:fat", "x:4MiB:thin:1"} {
		if _, err := appliance.ParseSPDKLvol(bad, sizeOf); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("lvol %q: want InvalidParams, got %v", bad, err)
		}
		if _, err := appliance.ParseSPDKMalloc(bad, sizeOf); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("malloc %q: want InvalidParams, got %v", bad, err)
		}
	}
	for _, bad := range []string{"lvs0", "lvs0=", "=b", "lvs0=b:3", "lvs0=b:0"} {
		if _, err := appliance.ParseSPDKLvstore(bad, sizeOf); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("lvstore %q: want InvalidParams, got %v", bad, err)
		}
	}
}

// FuzzParseSPDKFlags: the flag parsers never panic, refuse with
// InvalidParams, and whatever they accept makes a plan that validates.
func FuzzParseSPDKFlags(f *testing.F) {
	for _, s := range []string{"Nvme0=0000:5e:00.0", "R=[fd00::5]:4420/nqn.2026-11.io.kvtier:remote",
		"R=10.0.0.1:4420/nqn.2014-08.org.nvmexpress:uuid:1b4e28ba", "Malloc0:64MiB", "lvs0=Malloc0:1MiB",
		"vol0:16MiB:thin", "x=y=z", "a:b:c:d", "=", ":", "n=[::1]:1/nqn.2026-01.a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		p := spdk.Plan{Subsystem: spdk.SubsystemSpec{NQN: "nqn.2026-11.io.kvtier:fuzz",
			Listen: spdk.ListenAddress{Trtype: "TCP", Traddr: "127.0.0.1", Trsvcid: "4420"}}}
		check := func(what string, err error) bool {
			if err != nil && !kverr.Is(err, kverr.InvalidParams) {
				t.Fatalf("%s %q: error without InvalidParams: %v", what, spec, err)
			}
			return err == nil
		}
		if c, err := appliance.ParseSPDKController(spec); check("controller", err) {
			p.Controllers = []spdk.ControllerSpec{c}
			if err := p.Validate(); err != nil {
				t.Fatalf("controller %q accepted as %+v but plan refuses it: %v", spec, c, err)
			}
			p.Controllers = nil
		}
		base := spdk.MallocSpec{Name: "Base0", Size: 1 << 30}
		if m, err := appliance.ParseSPDKMalloc(spec, sizeOf); check("malloc", err) {
			p.Mallocs = []spdk.MallocSpec{m}
			if m.Name != base.Name {
				p.Mallocs = append(p.Mallocs, base)
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("malloc %q accepted as %+v but plan refuses it: %v", spec, m, err)
			}
			p.Mallocs = nil
		}
		if l, err := appliance.ParseSPDKLvstore(spec, sizeOf); check("lvstore", err) && l.Name != l.BaseBdev {
			p.Mallocs = []spdk.MallocSpec{{Name: l.BaseBdev, Size: 1 << 30}}
			p.Lvstore = l
			if err := p.Validate(); err != nil {
				t.Fatalf("lvstore %q accepted as %+v but plan refuses it: %v", spec, l, err)
			}
			p.Mallocs, p.Lvstore = nil, nil
		}
		if v, err := appliance.ParseSPDKLvol(spec, sizeOf); check("lvol", err) {
			p.Mallocs = []spdk.MallocSpec{base}
			p.Lvstore = &spdk.LvstoreSpec{Name: "lvsfuzz", BaseBdev: base.Name}
			p.Lvols = []spdk.LvolSpec{v}
			if err := p.Validate(); err != nil {
				t.Fatalf("lvol %q accepted as %+v but plan refuses it: %v", spec, v, err)
			}
		}
	})
}
