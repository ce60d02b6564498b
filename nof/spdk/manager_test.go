package spdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/spdk"
	"github.com/kvtier/kvtier/nof/spdk/spdktest"
)

const (
	applianceNQN = "nqn.2026-11.io.kvtier:appliance-a"
	remoteNQN    = "nqn.2026-11.io.kvtier:remote"
	gpuHost1     = "nqn.2026-11.io.kvtier:gpu-1"
	gpuHost2     = "nqn.2026-11.io.kvtier:gpu-2"
)

type env struct {
	fake   *spdktest.FakeSPDK
	srv    *spdktest.Server
	client *spdk.Client
	mgr    *spdk.Manager
	plan   spdk.Plan
}

// newEnv serves a FakeSPDK on a real Unix socket, with one remote NVMe/TCP
// subsystem (two namespaces) and one PCIe SSD attachable, and a plan using
// all kinds of bdev.
func newEnv(t *testing.T, opts spdktest.Options) *env {
	t.Helper()
	f := spdktest.NewFake()
	f.AddNVMeTarget("tcp", "127.0.0.1", "4420", remoteNQN,
		spdktest.FakeNamespace{NSID: 1, BlockSize: 4096, NumBlocks: 8192},
		spdktest.FakeNamespace{NSID: 2, BlockSize: 512, NumBlocks: 65536})
	f.AddNVMeTarget("pcie", "0000:5e:00.0", "", "", spdktest.FakeNamespace{NSID: 1, BlockSize: 4096, NumBlocks: 1 << 18})
	srv, err := spdktest.Listen(filepath.Join(t.TempDir(), "spdk.sock"), f.Handle, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	img := filepath.Join(t.TempDir(), "aio.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv.Path())
	return &env{fake: f, srv: srv, client: c, mgr: spdk.NewManager(c), plan: spdk.Plan{
		Controllers: []spdk.ControllerSpec{
			{Name: "Nvme0", Trtype: "tcp", Traddr: "127.0.0.1", Trsvcid: "4420", Subnqn: remoteNQN, Hostnqn: "nqn.2026-11.io.kvtier:appliance-a-host"},
			{Name: "Pcie0", Trtype: "pcie", Traddr: "0000:5e:00.0"},
		},
		AioFiles: []spdk.AioSpec{{Name: "Aio0", Filename: img, BlockSize: 4096}},
		Mallocs:  []spdk.MallocSpec{{Name: "Malloc0", Size: 64 << 20}, {Name: "Malloc1", Size: 128 << 20}},
		Lvstore:  &spdk.LvstoreSpec{Name: "lvs0", BaseBdev: "Malloc1", ClusterSize: 1 << 20},
		Lvols:    []spdk.LvolSpec{{Name: "vol0", SizeMiB: 16, Thin: true}, {Name: "vol1", SizeMiB: 8}},
		Subsystem: spdk.SubsystemSpec{NQN: applianceNQN, Serial: "KVTIER0000000042", Model: "kvtier appliance",
			Hosts:  []string{gpuHost1, gpuHost2},
			Listen: spdk.ListenAddress{Trtype: "TCP", Traddr: "127.0.0.1", Trsvcid: "4420"}},
	}}
}

type nsWant struct {
	plan string
	size uint64
	bs   uint32
}

var wantExports = []nsWant{
	{"Nvme0n1", 32 << 20, 4096}, {"Nvme0n2", 32 << 20, 512}, {"Pcie0n1", 1 << 30, 4096},
	{"Aio0", 32 << 20, 4096}, {"Malloc0", 64 << 20, 4096}, {"lvs0/vol0", 16 << 20, 4096}, {"lvs0/vol1", 8 << 20, 4096},
}

func checkExports(t *testing.T, got []spdk.Namespace) {
	t.Helper()
	if len(got) != len(wantExports) {
		t.Fatalf("%d namespaces, want %d: %+v", len(got), len(wantExports), got)
	}
	seen := map[uint32]bool{}
	for i, w := range wantExports {
		g := got[i]
		if g.PlanName != w.plan || g.Size != w.size || g.BlockSize != w.bs || g.NSID == 0 || seen[g.NSID] || g.UUID == "" {
			t.Fatalf("namespace %d = %+v, want %+v", i, g, w)
		}
		seen[g.NSID] = true
	}
}

func (e *env) subsystem(t *testing.T) spdk.Subsystem {
	t.Helper()
	ss, err := e.client.NvmfGetSubsystems(context.Background(), spdk.NvmfGetSubsystemsParams{Nqn: applianceNQN})
	if err != nil || len(ss) != 1 {
		t.Fatalf("%v %v", ss, err)
	}
	return ss[0]
}

func TestManagerApplyAndIdempotence(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	ctx := context.Background()
	got, err := e.mgr.Apply(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	checkExports(t, got)
	s := e.subsystem(t)
	if s.AllowAnyHost || len(s.Hosts) != 2 || s.SerialNumber != "KVTIER0000000042" || len(s.Namespaces) != len(wantExports) ||
		len(s.ListenAddresses) != 1 || s.ListenAddresses[0].Adrfam != "IPv4" {
		t.Fatalf("subsystem %+v", s)
	}
	// The lvstore's base is not exported; lvols are exported by their UUID name.
	for _, n := range s.Namespaces {
		if n.BdevName == "Malloc1" {
			t.Fatal("lvstore base exported")
		}
	}
	before := e.fake.MutatingCalls()
	again, err := e.mgr.Apply(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, again) {
		t.Fatalf("second apply differs:\n%+v\n%+v", got, again)
	}
	if n := e.fake.MutatingCalls(); n != before {
		t.Fatalf("second apply made %d mutating calls", n-before)
	}
	now, err := e.mgr.Namespaces(ctx, applianceNQN)
	if err != nil || len(now) != len(got) || now[6].Bdev != got[6].Bdev {
		t.Fatalf("Namespaces: %+v %v", now, err)
	}
}

// A failure half-way (SPDK refusing add_ns) leaves a state that the next
// Apply completes, ending exactly where a clean Apply ends.
func TestManagerConvergesAfterFailure(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	ctx := context.Background()
	e.fake.FailNext("nvmf_subsystem_add_ns", &spdk.RPCError{Code: -12, Message: "Cannot allocate memory"})
	_, err := e.mgr.Apply(ctx, e.plan)
	var re *spdk.RPCError
	if !errors.As(err, &re) || re.Code != -12 || !strings.Contains(err.Error(), "nvmf_subsystem_add_ns") {
		t.Fatalf("got %v", err)
	}
	got, err := e.mgr.Apply(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	checkExports(t, got)
	if n := e.fake.Calls("bdev_malloc_create"); n != 2 {
		t.Fatalf("malloc created %d times", n)
	}
}

// The connection breaks mid-Apply (as after an SPDK parse error); a new
// client on a fresh socket to the same SPDK state converges.
func TestManagerConvergesAfterConnectionLoss(t *testing.T) {
	e := newEnv(t, spdktest.Options{CloseOn: "bdev_lvol_create"})
	ctx := context.Background()
	if _, err := e.mgr.Apply(ctx, e.plan); !errors.Is(err, spdk.ErrConnLost) {
		t.Fatalf("got %v", err)
	}
	srv2, err := spdktest.Listen(filepath.Join(t.TempDir(), "spdk2.sock"), e.fake.Handle, spdktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	got, err := spdk.NewManager(newClient(t, srv2.Path())).Apply(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	checkExports(t, got)
}

// Drift is repaired: a stray namespace and host are removed, a missing
// listener and host are restored, and existing NSIDs are kept.
func TestManagerRepairsDrift(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	ctx := context.Background()
	first, err := e.mgr.Apply(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	c := e.client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.BdevMallocCreate(ctx, spdk.BdevMallocCreateParams{Name: "Stray", NumBlocks: 1024, BlockSize: 512})
	must(err)
	_, err = c.NvmfSubsystemAddNs(ctx, spdk.NvmfSubsystemAddNsParams{Nqn: applianceNQN, Namespace: spdk.NamespaceParams{BdevName: "Stray"}})
	must(err)
	must(c.NvmfSubsystemRemoveHost(ctx, spdk.NvmfHostParams{Nqn: applianceNQN, Host: gpuHost2}))
	must(c.NvmfSubsystemAddHost(ctx, spdk.NvmfHostParams{Nqn: applianceNQN, Host: "nqn.2026-11.io.kvtier:intruder"}))
	must(c.NvmfSubsystemRemoveListener(ctx, spdk.NvmfListenerParams{Nqn: applianceNQN,
		ListenAddress: spdk.ListenAddress{Trtype: "TCP", Adrfam: "IPv4", Traddr: "127.0.0.1", Trsvcid: "4420"}}))
	again, err := e.mgr.Apply(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("NSIDs changed:\n%+v\n%+v", first, again)
	}
	s := e.subsystem(t)
	var hosts []string
	for _, h := range s.Hosts {
		hosts = append(hosts, h.Nqn)
	}
	if len(s.Namespaces) != len(wantExports) || len(s.ListenAddresses) != 1 || strings.Join(hosts, ",") != gpuHost1+","+gpuHost2 {
		t.Fatalf("not repaired: %+v", s)
	}
}

// An object of a planned name that differs from the plan is not touched.
func TestManagerConflict(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	ctx := context.Background()
	if _, err := e.client.BdevMallocCreate(ctx, spdk.BdevMallocCreateParams{Name: "Malloc0", NumBlocks: 1024, BlockSize: 512}); err != nil {
		t.Fatal(err)
	}
	_, err := e.mgr.Apply(ctx, e.plan)
	if !errors.Is(err, spdk.ErrConflict) || !strings.Contains(err.Error(), "Malloc0") {
		t.Fatalf("got %v", err)
	}
	b, err := e.client.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: "Malloc0"})
	if err != nil || b[0].NumBlocks != 1024 || b[0].Claimed {
		t.Fatalf("conflicting bdev changed: %+v %v", b, err)
	}
	if e.fake.Calls("bdev_malloc_delete") != 0 {
		t.Fatal("conflicting bdev deleted")
	}
	// A subsystem created elsewhere with another serial is a conflict too.
	e2 := newEnv(t, spdktest.Options{})
	if err := e2.client.NvmfCreateSubsystem(ctx, spdk.NvmfCreateSubsystemParams{Nqn: applianceNQN, SerialNumber: "OTHER"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.mgr.Apply(ctx, e2.plan); !errors.Is(err, spdk.ErrConflict) {
		t.Fatalf("got %v", err)
	}
}

// Invalid plans are refused before any request is sent.
func TestManagerRejectsBadPlans(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	mut := []func(p *spdk.Plan){
		func(p *spdk.Plan) { p.Subsystem.NQN = "not-an-nqn" },
		func(p *spdk.Plan) { p.Subsystem.Serial = strings.Repeat("9", 21) },
		func(p *spdk.Plan) { p.Subsystem.Hosts = []string{"bogus"} },
		func(p *spdk.Plan) { p.Subsystem.Listen.Trsvcid = "0" },
		func(p *spdk.Plan) { p.Subsystem.Listen.Trtype = "RDMA" },
		func(p *spdk.Plan) { p.Controllers[0].Trtype = "fc" },
		func(p *spdk.Plan) { p.Controllers[1].Traddr = "5e:00" },
		func(p *spdk.Plan) { p.Controllers[0].Subnqn = "" },
		func(p *spdk.Plan) { p.AioFiles[0].Filename = "relative.img" },
		func(p *spdk.Plan) { p.Mallocs[0].Size = 1000 },
		func(p *spdk.Plan) { p.Mallocs[1].Name = "Aio0" },
		func(p *spdk.Plan) { p.Lvstore.BaseBdev = "Nope" },
		func(p *spdk.Plan) { p.Lvstore = nil },
		func(p *spdk.Plan) { p.Lvols[1].Name = "vol0" },
		func(p *spdk.Plan) { p.Lvols[0].SizeMiB = 0 },
		func(p *spdk.Plan) { *p = spdk.Plan{Subsystem: p.Subsystem} },
	}
	for i, m := range mut {
		p := e.plan
		p.Controllers = append([]spdk.ControllerSpec(nil), e.plan.Controllers...)
		p.AioFiles = append([]spdk.AioSpec(nil), e.plan.AioFiles...)
		p.Mallocs = append([]spdk.MallocSpec(nil), e.plan.Mallocs...)
		p.Lvols = append([]spdk.LvolSpec(nil), e.plan.Lvols...)
		ls := *e.plan.Lvstore
		p.Lvstore = &ls
		m(&p)
		if _, err := e.mgr.Apply(context.Background(), p); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("mutation %d: got %v", i, err)
		}
		if err := e.mgr.Teardown(context.Background(), p); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("mutation %d teardown: got %v", i, err)
		}
	}
	if n := len(e.srv.Received()); n != 0 {
		t.Fatalf("%d requests sent for invalid plans", n)
	}
}

func TestManagerTeardown(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	ctx := context.Background()
	if _, err := e.mgr.Apply(ctx, e.plan); err != nil {
		t.Fatal(err)
	}
	// A bdev the plan does not own survives teardown.
	if _, err := e.client.BdevMallocCreate(ctx, spdk.BdevMallocCreateParams{Name: "Other", NumBlocks: 8, BlockSize: 512}); err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.Teardown(ctx, e.plan); err != nil {
		t.Fatal(err)
	}
	bs, err := e.client.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{})
	if err != nil || len(bs) != 1 || bs[0].Name != "Other" {
		t.Fatalf("bdevs after teardown: %+v %v", bs, err)
	}
	if _, err := e.client.NvmfGetSubsystems(ctx, spdk.NvmfGetSubsystemsParams{Nqn: applianceNQN}); !spdk.IsCode(err, spdk.ErrnoENODEV) {
		t.Fatalf("subsystem still there: %v", err)
	}
	ctrls, err := e.client.BdevNvmeGetControllers(ctx, "")
	if err != nil || len(ctrls) != 0 {
		t.Fatalf("controllers: %+v %v", ctrls, err)
	}
	lvs, err := e.client.BdevLvolGetLvstores(ctx, spdk.LvstoreSelector{})
	if err != nil || len(lvs) != 0 {
		t.Fatalf("lvstores: %+v %v", lvs, err)
	}
	before := e.fake.MutatingCalls()
	if err := e.mgr.Teardown(ctx, e.plan); err != nil {
		t.Fatal(err)
	}
	if e.fake.MutatingCalls() != before {
		t.Fatal("second teardown mutated state")
	}
	// And the plan can be applied again from scratch.
	got, err := e.mgr.Apply(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	checkExports(t, got)
}

// Recording 61: attach succeeds with no bdevs when namespace UUIDs collide.
// The Manager reports it and detaches again.
func TestManagerAttachWithoutBdevs(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	ctx := context.Background()
	const dup = "12a3e9f9-1984-4117-ba9d-94241d28bd9f"
	if _, err := e.client.BdevMallocCreate(ctx, spdk.BdevMallocCreateParams{Name: "Local", NumBlocks: 8, BlockSize: 512, UUID: dup}); err != nil {
		t.Fatal(err)
	}
	e.fake.AddNVMeTarget("tcp", "127.0.0.1", "4420", remoteNQN, spdktest.FakeNamespace{NSID: 1, BlockSize: 512, NumBlocks: 8, UUID: dup})
	p := e.plan
	p.Controllers = p.Controllers[:1]
	_, err := e.mgr.Apply(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "no namespace bdevs") {
		t.Fatalf("got %v", err)
	}
	if ctrls, _ := e.client.BdevNvmeGetControllers(ctx, ""); len(ctrls) != 0 {
		t.Fatalf("controller left attached: %+v", ctrls)
	}
}

// A plan without hosts allows any host; without lvols exports every bdev.
func TestManagerMinimalPlan(t *testing.T) {
	e := newEnv(t, spdktest.Options{Chunk: 64})
	p := spdk.Plan{
		Mallocs:   []spdk.MallocSpec{{Name: "Malloc0", Size: 64 << 20, BlockSize: 512}},
		Subsystem: spdk.SubsystemSpec{NQN: applianceNQN, Listen: spdk.ListenAddress{Trtype: "tcp", Traddr: "127.0.0.1", Trsvcid: "4420"}},
	}
	got, err := e.mgr.Apply(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].NSID != 1 || got[0].Size != 64<<20 || got[0].BlockSize != 512 {
		t.Fatalf("%+v", got)
	}
	s := e.subsystem(t)
	if !s.AllowAnyHost || s.SerialNumber != "00000000000000000000" || s.ModelNumber != "SPDK bdev Controller" {
		t.Fatalf("%+v", s)
	}
	if e.fake.Calls("nvmf_create_transport") != 1 {
		t.Fatal("transport not created once")
	}
}

// Another client creates the transport and the subsystem between the
// Manager's read and its create (simulated by hiding them from the first
// read). SPDK then answers the recorded "Transport type 'TCP' already exists"
// (treated as success) and the ambiguous "Unable to create subsystem"
// (resolved by re-reading the subsystem).
func TestManagerCreateRaces(t *testing.T) {
	f := spdktest.NewFake()
	hidden := map[string]bool{"nvmf_get_transports": true, "nvmf_get_subsystems": true}
	h := func(method string, params json.RawMessage) (json.RawMessage, *spdk.RPCError) {
		if hidden[method] {
			delete(hidden, method)
			if method == "nvmf_get_transports" {
				return json.RawMessage(`[]`), nil
			}
			return nil, &spdk.RPCError{Code: spdk.ErrnoENODEV, Message: "No such device"}
		}
		return f.Handle(method, params)
	}
	srv, err := spdktest.Listen(filepath.Join(t.TempDir(), "spdk.sock"), h, spdktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := newClient(t, srv.Path())
	ctx := context.Background()
	if err := c.NvmfCreateTransport(ctx, spdk.NvmfCreateTransportParams{Trtype: "TCP"}); err != nil {
		t.Fatal(err)
	}
	if err := c.NvmfCreateSubsystem(ctx, spdk.NvmfCreateSubsystemParams{Nqn: applianceNQN, AllowAnyHost: true}); err != nil {
		t.Fatal(err)
	}
	p := spdk.Plan{
		Mallocs:   []spdk.MallocSpec{{Name: "Malloc0", Size: 8 << 20}},
		Subsystem: spdk.SubsystemSpec{NQN: applianceNQN, Listen: spdk.ListenAddress{Trtype: "TCP", Traddr: "127.0.0.1", Trsvcid: "4420"}},
	}
	got, err := spdk.NewManager(c).Apply(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || f.Calls("nvmf_create_transport") != 2 || f.Calls("nvmf_create_subsystem") != 2 {
		t.Fatalf("%+v transport creates %d subsystem creates %d", got, f.Calls("nvmf_create_transport"), f.Calls("nvmf_create_subsystem"))
	}
	// A bad NQN gets the same -32603 message but no subsystem appears: that
	// is an error, not success (refused earlier by Validate here, so drive
	// the client directly to show the ambiguity).
	err = c.NvmfCreateSubsystem(ctx, spdk.NvmfCreateSubsystemParams{Nqn: "not-an-nqn"})
	if !spdk.IsCode(err, spdk.CodeInternalError) || !strings.HasPrefix(err.(*spdk.RPCError).Message, "Unable to create subsystem") {
		t.Fatalf("got %v", err)
	}
}
