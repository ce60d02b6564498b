package spdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/spdk"
	"github.com/kvtier/kvtier/nof/spdk/spdktest"
)

func replayServer(t *testing.T, opts spdktest.Options) *spdktest.Server {
	t.Helper()
	ex, err := spdktest.Recordings()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := spdktest.NewReplay(ex)
	if err != nil {
		t.Fatal(err)
	}
	s, err := spdktest.Listen(filepath.Join(t.TempDir(), "spdk.sock"), rp.Handle, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newClient(t *testing.T, path string) *spdk.Client {
	t.Helper()
	c, err := spdk.New(spdk.Config{Socket: path, CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type typedCase struct {
	rec   string // recording name
	call  func(ctx context.Context, c *spdk.Client) (any, error)
	check func(t *testing.T, res any, err error)
}

func wantRPCError(code int, msg string) func(t *testing.T, res any, err error) {
	return func(t *testing.T, _ any, err error) {
		t.Helper()
		var re *spdk.RPCError
		if !errors.As(err, &re) {
			t.Fatalf("want *RPCError %d %q, got %v", code, msg, err)
		}
		if re.Code != code || re.Message != msg {
			t.Fatalf("got code %d message %q, want %d %q", re.Code, re.Message, code, msg)
		}
	}
}

func wantOK(t *testing.T, _ any, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantEqual(want any) func(t *testing.T, res any, err error) {
	return func(t *testing.T, res any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res, want) {
			t.Fatalf("got %#v, want %#v", res, want)
		}
	}
}

const testNQN = "nqn.2026-11.io.kvtier:test"
const loopNQN = "nqn.2026-11.io.kvtier:loop"

var listener4420 = spdk.ListenAddress{Trtype: "TCP", Adrfam: "IPv4", Traddr: "127.0.0.1", Trsvcid: "4420"}

// typedCases call every recorded method through its typed wrapper with
// hand-written params, in recording order.
var typedCases = []typedCase{
	{"01-spdk_get_version", func(ctx context.Context, c *spdk.Client) (any, error) { return c.SpdkGetVersion(ctx) },
		func(t *testing.T, res any, err error) {
			v := res.(spdk.Version)
			if err != nil || v.Version != "SPDK v26.05" || v.Fields.Major != 26 || v.Fields.Minor != 5 {
				t.Fatalf("%+v %v", v, err)
			}
		}},
	{"02-framework_wait_init", func(ctx context.Context, c *spdk.Client) (any, error) { return nil, c.FrameworkWaitInit(ctx) }, wantOK},
	{"03-nvmf_create_transport", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfCreateTransport(ctx, spdk.NvmfCreateTransportParams{Trtype: "TCP"})
	}, wantOK},
	{"04-nvmf_get_transports", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfGetTransports(ctx, spdk.NvmfGetTransportsParams{})
	}, func(t *testing.T, res any, err error) {
		tr := res.([]spdk.Transport)
		if err != nil || len(tr) != 1 || tr[0].Trtype != "TCP" || tr[0].MaxIOSize != 131072 ||
			tr[0].MaxQueueDepth != 128 || !tr[0].C2HSuccess || tr[0].MinKato != 10000 {
			t.Fatalf("%+v %v", tr, err)
		}
	}},
	{"05-bdev_malloc_create", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevMallocCreate(ctx, spdk.BdevMallocCreateParams{Name: "Malloc0", NumBlocks: 131072, BlockSize: 512})
	}, wantEqual("Malloc0")},
	{"06-nvmf_create_subsystem", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfCreateSubsystem(ctx, spdk.NvmfCreateSubsystemParams{Nqn: testNQN, AllowAnyHost: true,
			SerialNumber: "KVTIER0000000001", ModelNumber: "kvtier lab malloc"})
	}, wantOK},
	{"07-nvmf_subsystem_add_ns", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfSubsystemAddNs(ctx, spdk.NvmfSubsystemAddNsParams{Nqn: testNQN, Namespace: spdk.NamespaceParams{BdevName: "Malloc0"}})
	}, wantEqual(uint32(1))},
	{"08-nvmf_subsystem_add_listener", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfSubsystemAddListener(ctx, spdk.NvmfListenerParams{Nqn: testNQN, ListenAddress: listener4420})
	}, wantOK},
	{"09-nvmf_get_subsystems", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfGetSubsystems(ctx, spdk.NvmfGetSubsystemsParams{})
	}, func(t *testing.T, res any, err error) {
		ss := res.([]spdk.Subsystem)
		if err != nil || len(ss) != 2 || ss[0].Subtype != "Discovery" || ss[1].Nqn != testNQN ||
			len(ss[1].Namespaces) != 1 || ss[1].Namespaces[0].Nsid != 1 || ss[1].Namespaces[0].BdevName != "Malloc0" ||
			ss[1].Namespaces[0].Nguid != "12A3E9F919844117BA9D94241D28BD9F" || ss[1].ListenAddresses[0] != listener4420 ||
			ss[1].SerialNumber != "KVTIER0000000001" || ss[1].MaxCntlid != 65519 {
			t.Fatalf("%+v %v", ss, err)
		}
	}},
	{"10-bdev_get_bdevs", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: "Malloc0"})
	}, func(t *testing.T, res any, err error) {
		b := res.([]spdk.Bdev)
		if err != nil || len(b) != 1 || b[0].Size() != 64<<20 || b[0].ClaimType != "exclusive_write" ||
			!b[0].SupportedIOTypes["unmap"] || !b[0].HasName("12a3e9f9-1984-4117-ba9d-94241d28bd9f") {
			t.Fatalf("%+v %v", b, err)
		}
	}},
	{"11-nvmf_get_stats", func(ctx context.Context, c *spdk.Client) (any, error) { return c.NvmfGetStats(ctx) },
		func(t *testing.T, res any, err error) {
			s := res.(spdk.NvmfStats)
			if err != nil || s.TickRate != 2100000000 || len(s.PollGroups) != 1 || s.PollGroups[0].CompletedNvmeIO != 1416560 ||
				s.PollGroups[0].Transports[0].Trtype != "TCP" {
				t.Fatalf("%+v %v", s, err)
			}
		}},
	{"12-bdev_get_iostat", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevGetIostat(ctx, spdk.BdevGetIostatParams{Names: []string{"Malloc0"}})
	}, func(t *testing.T, res any, err error) {
		s := res.(spdk.IOStat)
		if err != nil || len(s.Bdevs) != 1 || s.Bdevs[0].BytesRead != 9369510400 || s.Bdevs[0].NumWriteOps != 772300 ||
			s.Bdevs[0].MinReadLatencyTicks != 1848 {
			t.Fatalf("%+v %v", s, err)
		}
	}},
	{"13-nvmf_subsystem_get_controllers", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfSubsystemGetControllers(ctx, testNQN)
	}, wantEqual([]spdk.SubsystemController{})},
	{"14-error-method-not-found", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.Call(ctx, "no_such_method", nil, nil)
	}, wantRPCError(-32601, "Method not found")},
	{"15-error-invalid-params-missing", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.Call(ctx, "bdev_malloc_create", map[string]string{"name": "MallocX"}, nil)
	}, wantRPCError(-32603, "spdk_json_decode_object failed")},
	{"16-error-unknown-param", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.Call(ctx, "nvmf_create_subsystem", map[string]any{"nqn": "nqn.2026-11.io.kvtier:x", "bogus": 1}, nil)
	}, wantRPCError(-32602, "Invalid parameters")},
	{"17-error-duplicate-subsystem", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfCreateSubsystem(ctx, spdk.NvmfCreateSubsystemParams{Nqn: testNQN})
	}, wantRPCError(-32603, "Unable to create subsystem nqn.2026-11.io.kvtier:test")},
	{"18-error-bdev-not-found", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: "NoSuchBdev"})
	}, wantRPCError(spdk.ErrnoENODEV, "No such device")},
	{"19-error-duplicate-transport", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfCreateTransport(ctx, spdk.NvmfCreateTransportParams{Trtype: "TCP"})
	}, wantRPCError(-32603, "Transport type 'TCP' already exists")},
	{"20-error-bad-nqn", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfCreateSubsystem(ctx, spdk.NvmfCreateSubsystemParams{Nqn: "not-an-nqn"})
	}, wantRPCError(-32603, "Unable to create subsystem not-an-nqn")},
	{"21-error-add-ns-missing-bdev", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfSubsystemAddNs(ctx, spdk.NvmfSubsystemAddNsParams{Nqn: testNQN, Namespace: spdk.NamespaceParams{BdevName: "NoSuchBdev"}})
	}, wantRPCError(-32602, "Invalid parameters")},
	{"50-bdev_aio_create", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevAioCreate(ctx, spdk.BdevAioCreateParams{Name: "Aio0", Filename: "/run/kvtier-lab/aio.img", BlockSize: 4096})
	}, wantEqual("Aio0")},
	{"51-bdev_uring_create", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevUringCreate(ctx, spdk.BdevUringCreateParams{Name: "Uring0", Filename: "/run/kvtier-lab/uring.img", BlockSize: 4096})
	}, wantEqual("Uring0")},
	{"52-bdev_malloc_create-lvs-base", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevMallocCreate(ctx, spdk.BdevMallocCreateParams{Name: "Malloc1", NumBlocks: 32768, BlockSize: 4096})
	}, wantEqual("Malloc1")},
	{"53-bdev_lvol_create_lvstore", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevLvolCreateLvstore(ctx, spdk.BdevLvolCreateLvstoreParams{BdevName: "Malloc1", LvsName: "lvs0", ClusterSz: 1 << 20})
	}, wantEqual("c621fb61-5586-4f6e-b54f-a34f78517cb2")},
	{"54-bdev_lvol_create", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevLvolCreate(ctx, spdk.BdevLvolCreateParams{LvolName: "vol0", SizeInMiB: 16, LvsName: "lvs0", ThinProvision: true})
	}, wantEqual("d424fc03-4e3b-4f54-9510-1fff6bc4f0ef")},
	{"55-bdev_lvol_get_lvstores", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevLvolGetLvstores(ctx, spdk.LvstoreSelector{})
	}, func(t *testing.T, res any, err error) {
		l := res.([]spdk.Lvstore)
		if err != nil || len(l) != 1 || l[0].Name != "lvs0" || l[0].BaseBdev != "Malloc1" || l[0].ClusterSize != 1<<20 || l[0].FreeClusters != 127 {
			t.Fatalf("%+v %v", l, err)
		}
	}},
	{"56-bdev_get_bdevs-lvol", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: "lvs0/vol0"})
	}, func(t *testing.T, res any, err error) {
		b := res.([]spdk.Bdev)
		if err != nil || len(b) != 1 || b[0].Name != "d424fc03-4e3b-4f54-9510-1fff6bc4f0ef" || !b[0].HasName("lvs0/vol0") ||
			b[0].Size() != 16<<20 || b[0].ProductName != "Logical Volume" {
			t.Fatalf("%+v %v", b, err)
		}
	}},
	{"57-nvmf_subsystem_add_ns-lvol-nsid5", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfSubsystemAddNs(ctx, spdk.NvmfSubsystemAddNsParams{Nqn: testNQN, Namespace: spdk.NamespaceParams{BdevName: "lvs0/vol0", Nsid: 5}})
	}, wantEqual(uint32(5))},
	{"58-nvmf_subsystem_add_host", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfSubsystemAddHost(ctx, spdk.NvmfHostParams{Nqn: testNQN, Host: "nqn.2026-11.io.kvtier:host-lab"})
	}, wantOK},
	{"59-bdev_get_bdevs-all", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{})
	}, func(t *testing.T, res any, err error) {
		b := res.([]spdk.Bdev)
		if err != nil || len(b) < 4 || b[0].Name != "Malloc0" || b[1].Name != "Aio0" || b[1].Size() != 32<<20 {
			t.Fatalf("%d bdevs %v", len(b), err)
		}
	}},
	{"60-rpc_get_methods", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.RPCGetMethods(ctx, spdk.RPCGetMethodsParams{Current: true})
	}, func(t *testing.T, res any, err error) {
		m := strings.Join(res.([]string), ",")
		if err != nil || !strings.Contains(m, "bdev_nvme_attach_controller") || !strings.Contains(m, "nvmf_subsystem_add_ns") {
			t.Fatalf("%v", err)
		}
	}},
	{"61-bdev_nvme_attach_controller", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevNvmeAttachController(ctx, spdk.BdevNvmeAttachControllerParams{Name: "Nvme0", Trtype: "tcp", Adrfam: "ipv4",
			Traddr: "127.0.0.1", Trsvcid: "4420", Subnqn: testNQN, Hostnqn: "nqn.2026-11.io.kvtier:host-loop"})
	}, wantEqual([]string{})},
	{"62-bdev_nvme_get_controllers", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevNvmeGetControllers(ctx, "")
	}, func(t *testing.T, res any, err error) {
		n := res.([]spdk.NvmeController)
		if err != nil || len(n) != 1 || n[0].Name != "Nvme0" || n[0].Ctrlrs[0].Trid.Subnqn != testNQN || n[0].Ctrlrs[0].Cntlid != 10 ||
			n[0].Ctrlrs[0].Host.Nqn != "nqn.2026-11.io.kvtier:host-loop" {
			t.Fatalf("%+v %v", n, err)
		}
	}},
	{"63-nvmf_subsystem_get_controllers-connected", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfSubsystemGetControllers(ctx, testNQN)
	}, wantEqual([]spdk.SubsystemController{{Cntlid: 10, Cntrltype: "io", Hostnqn: "nqn.2026-11.io.kvtier:host-loop",
		Hostid: "be0fffeb-0632-4e94-ab7e-a1c404c3be4f", NumIOQpairs: 1}})},
	{"64-nvmf_get_stats-connected", func(ctx context.Context, c *spdk.Client) (any, error) { return c.NvmfGetStats(ctx) },
		func(t *testing.T, res any, err error) {
			if s := res.(spdk.NvmfStats); err != nil || s.PollGroups[0].CurrentAdminQpairs != 1 || s.PollGroups[0].AdminQpairs != 11 {
				t.Fatalf("%+v %v", s, err)
			}
		}},
	{"65-bdev_nvme_detach_controller", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.BdevNvmeDetachController(ctx, spdk.BdevNvmeDetachControllerParams{Name: "Nvme0"})
	}, wantOK},
	{"66-nvmf_create_subsystem-loop", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfCreateSubsystem(ctx, spdk.NvmfCreateSubsystemParams{Nqn: loopNQN, AllowAnyHost: true})
	}, wantOK},
	{"67-nvmf_subsystem_add_ns-explicit-ids", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfSubsystemAddNs(ctx, spdk.NvmfSubsystemAddNsParams{Nqn: loopNQN, Namespace: spdk.NamespaceParams{BdevName: "Aio0", Nsid: 1,
			UUID: "6b0a0d1e-2f47-4c55-9a3c-1d2e3f405162", Nguid: "6B0A0D1E2F474C559A3C1D2E3F405162", Eui64: "0011223344556677"}})
	}, wantEqual(uint32(1))},
	{"68-nvmf_subsystem_add_listener-loop", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfSubsystemAddListener(ctx, spdk.NvmfListenerParams{Nqn: loopNQN, ListenAddress: listener4420})
	}, wantOK},
	{"69-bdev_nvme_attach_controller-loop", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevNvmeAttachController(ctx, spdk.BdevNvmeAttachControllerParams{Name: "Nvme1", Trtype: "tcp", Adrfam: "ipv4",
			Traddr: "127.0.0.1", Trsvcid: "4420", Subnqn: loopNQN, Hostnqn: "nqn.2026-11.io.kvtier:host-loop"})
	}, wantEqual([]string{"Nvme1n1"})},
	{"70-bdev_get_bdevs-Nvme1n1", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: "Nvme1n1"})
	}, func(t *testing.T, res any, err error) {
		b := res.([]spdk.Bdev)
		if err != nil || len(b) != 1 || b[0].ProductName != "NVMe disk" || b[0].BlockSize != 4096 || b[0].NumBlocks != 8192 ||
			!bytes.Contains(b[0].DriverSpecific, []byte(`"subnqn":"nqn.2026-11.io.kvtier:loop"`)) {
			t.Fatalf("%+v %v", b, err)
		}
	}},
	{"71-bdev_nvme_detach_controller-loop", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.BdevNvmeDetachController(ctx, spdk.BdevNvmeDetachControllerParams{Name: "Nvme1"})
	}, wantOK},
	{"72-nvmf_subsystem_remove_ns", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfSubsystemRemoveNs(ctx, spdk.NvmfSubsystemRemoveNsParams{Nqn: testNQN, Nsid: 5})
	}, wantOK},
	{"73-nvmf_delete_subsystem", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfDeleteSubsystem(ctx, loopNQN)
	}, wantOK},
	{"74-bdev_aio_delete", func(ctx context.Context, c *spdk.Client) (any, error) { return nil, c.BdevAioDelete(ctx, "Aio0") }, wantOK},
	{"75-bdev_uring_delete", func(ctx context.Context, c *spdk.Client) (any, error) { return nil, c.BdevUringDelete(ctx, "Uring0") }, wantOK},
	{"76-bdev_lvol_delete", func(ctx context.Context, c *spdk.Client) (any, error) { return nil, c.BdevLvolDelete(ctx, "lvs0/vol0") }, wantOK},
	{"77-bdev_lvol_delete_lvstore", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.BdevLvolDeleteLvstore(ctx, spdk.LvstoreSelector{LvsName: "lvs0"})
	}, wantOK},
	{"78-nvmf_subsystem_remove_host", func(ctx context.Context, c *spdk.Client) (any, error) {
		return nil, c.NvmfSubsystemRemoveHost(ctx, spdk.NvmfHostParams{Nqn: testNQN, Host: "nqn.2026-11.io.kvtier:host-lab"})
	}, wantOK},
	{"79-nvmf_get_subsystems-final", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.NvmfGetSubsystems(ctx, spdk.NvmfGetSubsystemsParams{Nqn: testNQN})
	}, func(t *testing.T, res any, err error) {
		if ss := res.([]spdk.Subsystem); err != nil || len(ss) != 1 || len(ss[0].Namespaces) != 1 || len(ss[0].Hosts) != 0 {
			t.Fatalf("%+v %v", ss, err)
		}
	}},
	{"80-waitforrpc-error-invalid-state", func(ctx context.Context, c *spdk.Client) (any, error) {
		return c.BdevMallocCreate(ctx, spdk.BdevMallocCreateParams{Name: "M", NumBlocks: 1024, BlockSize: 512})
	}, wantRPCError(spdk.CodeInvalidState, "Method may only be called after framework is initialized using framework_start_init RPC.")},
	{"81-waitforrpc-framework_start_init", func(ctx context.Context, c *spdk.Client) (any, error) { return nil, c.FrameworkStartInit(ctx) }, wantOK},
	{"82-waitforrpc-framework_wait_init", func(ctx context.Context, c *spdk.Client) (any, error) { return nil, c.FrameworkWaitInit(ctx) }, wantOK},
	{"83-waitforrpc-framework_start_init-again", func(ctx context.Context, c *spdk.Client) (any, error) { return nil, c.FrameworkStartInit(ctx) },
		wantRPCError(-1, "Method may only be called before framework is initialized. Use --wait-for-rpc command line parameter and then issue this RPC before the framework_start_init RPC.")},
	{"84-spdk_kill_instance", func(ctx context.Context, c *spdk.Client) (any, error) { return nil, c.SpdkKillInstance(ctx, "SIGTERM") }, wantOK},
}

// TestTypedAgainstRecordings runs every recorded exchange through the typed
// client (hand-written params), checks the decoded result or error, and
// compares the request the server received with the recorded request:
// same method, same params (semantically), an integer id, "jsonrpc":"2.0".
func TestTypedAgainstRecordings(t *testing.T) {
	s := replayServer(t, spdktest.Options{})
	c := newClient(t, s.Path())
	ctx := context.Background()
	for i, tc := range typedCases {
		rec, err := spdktest.Recording(tc.rec)
		if err != nil {
			t.Fatal(err)
		}
		res, err := tc.call(ctx, c)
		t.Run(tc.rec, func(t *testing.T) {
			tc.check(t, res, err)
			got := s.Received()
			if len(got) != i+1 {
				t.Fatalf("server received %d requests, want %d", len(got), i+1)
			}
			compareRequest(t, got[i], rec.Request)
		})
	}
}

func compareRequest(t *testing.T, got, want []byte) {
	t.Helper()
	type req struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
	}
	var g, w req
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("our request %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	gp, _ := spdktest.Canonical(g.Params)
	wp, _ := spdktest.Canonical(w.Params)
	if g.Method != w.Method || !bytes.Equal(gp, wp) {
		t.Fatalf("request differs:\n ours %s\n recorded %s", got, want)
	}
	if g.JSONRPC != "2.0" || len(g.ID) == 0 || g.ID[0] < '1' || g.ID[0] > '9' {
		t.Fatalf("bad envelope in %s", got)
	}
	if bytes.ContainsAny(got, " \n") && !bytes.Contains(want, []byte(" ")) {
		t.Fatalf("our request is not compact: %q", got)
	}
}

// TestConcurrentOutOfOrder has many calls outstanding on one connection at
// once while the server holds replies and sends them reversed, several per
// write, split into small pieces.
func TestConcurrentOutOfOrder(t *testing.T) {
	for _, opts := range []spdktest.Options{{Hold: 3}, {Hold: 8, Chunk: 7}, {Chunk: 1, Hold: 2}} {
		s := replayServer(t, opts)
		c := newClient(t, s.Path())
		ctx := context.Background()
		const n = 24 // a multiple of every Hold
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch i % 3 {
				case 0:
					v, err := c.SpdkGetVersion(ctx)
					if err == nil && v.Version != "SPDK v26.05" {
						err = errors.New("wrong version " + v.Version)
					}
					errs <- err
				case 1:
					errs <- c.FrameworkWaitInit(ctx)
				case 2:
					b, err := c.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: "Malloc0"})
					if err == nil && (len(b) != 1 || b[0].Name != "Malloc0") {
						err = errors.New("wrong bdev")
					}
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("opts %+v: %v", opts, err)
			}
		}
		if st := c.Stats(); st.Calls != n || st.Reconnects != 0 || st.LateReplies != 0 || st.Orphans != 0 {
			t.Fatalf("opts %+v: stats %+v", opts, st)
		}
	}
}

// TestBatch sends recording 35's batch (a success and an unknown method).
func TestBatch(t *testing.T) {
	s := replayServer(t, spdktest.Options{Chunk: 5})
	c := newClient(t, s.Path())
	var v spdk.Version
	calls := []*spdk.BatchCall{{Method: "spdk_get_version", Result: &v}, {Method: "no_such_method"}}
	if err := c.Batch(context.Background(), calls); err != nil {
		t.Fatal(err)
	}
	if calls[0].Err != nil || v.Version != "SPDK v26.05" {
		t.Fatalf("first: %v %+v", calls[0].Err, v)
	}
	if !spdk.IsCode(calls[1].Err, spdk.CodeMethodNotFound) {
		t.Fatalf("second: %v", calls[1].Err)
	}
	got := s.Received()
	if len(got) != 1 || got[0][0] != '[' {
		t.Fatalf("batch not sent as one array: %q", got)
	}
	if err := c.Batch(context.Background(), nil); err == nil {
		t.Fatal("empty batch accepted")
	}
}

// protocolCases are the recordings that are not typed calls; each is covered
// byte for byte by spdktest.TestServerFidelity and, from the client side, by
// the named tests.
var protocolCases = map[string]string{
	"30-proto-notification-no-id":    "the client never sends a request without id (compareRequest)",
	"31-proto-null-id":               "the client never sends a null id (compareRequest)",
	"32-proto-string-id":             "TestForeignIDIsOrphan",
	"33-proto-no-jsonrpc-member":     "TestFramerRecordedStreams (reply decodes)",
	"34-proto-pipelined-3":           "TestConcurrentOutOfOrder",
	"35-proto-batch":                 "TestBatch",
	"36-proto-invalid-id-type":       "TestNullIDErrorSoleCall (same reply shape)",
	"37-proto-wrong-version":         "TestNullIDErrorSoleCall",
	"38-proto-params-scalar":         "TestBadParamsNotSent (refused before sending)",
	"39-proto-parse-error-closes":    "TestConnectionClosedMidCallThenReconnect",
	"40-proto-error-on-notification": "TestNullIDErrorSoleCall (same reply shape)",
	"41-proto-parse-error-only":      "TestConnectionClosedMidCallThenReconnect",
}

func TestEveryRecordingCovered(t *testing.T) {
	ex, err := spdktest.Recordings()
	if err != nil {
		t.Fatal(err)
	}
	typed := map[string]bool{}
	for _, tc := range typedCases {
		typed[tc.rec] = true
	}
	for _, e := range ex {
		if !typed[e.Name] && protocolCases[e.Name] == "" {
			t.Errorf("recording %s is not exercised", e.Name)
		}
	}
}
