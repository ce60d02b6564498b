package spdktest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/kvtier/kvtier/nof/spdk"
)

const (
	kindMalloc = "malloc"
	kindAio    = "aio"
	kindLvol   = "lvol"
	kindNvme   = "nvme"
)

// Error replies. The first four are recorded; errBusy, errNoSpace, errIO,
// errNoEnt follow SPDK's "-errno + strerror" convention for cases the lab did
// not record.
var (
	errInvalidParams = &spdk.RPCError{Code: spdk.CodeInvalidParams, Message: "Invalid parameters"} // 16, 21
	errDecode        = &spdk.RPCError{Code: spdk.CodeInternalError, Message: "spdk_json_decode_object failed"}
	errNoDev         = &spdk.RPCError{Code: spdk.ErrnoENODEV, Message: "No such device"}          // 18
	errMethod        = &spdk.RPCError{Code: spdk.CodeMethodNotFound, Message: "Method not found"} // 14
	errExist         = &spdk.RPCError{Code: spdk.ErrnoEEXIST, Message: "File exists"}
	errBusy          = &spdk.RPCError{Code: -16, Message: "Device or resource busy"}
	errNoSpace       = &spdk.RPCError{Code: -28, Message: "No space left on device"}
	errIO            = &spdk.RPCError{Code: -5, Message: "Input/output error"}
	errNoEnt         = &spdk.RPCError{Code: -2, Message: "No such file or directory"}
	errPerm          = &spdk.RPCError{Code: -1, Message: "Operation not permitted"}
)

// FakeNamespace is a namespace of a simulated remote or PCIe NVMe controller
// that bdev_nvme_attach_controller can attach.
type FakeNamespace struct {
	NSID      uint32
	BlockSize uint32
	NumBlocks uint64
	UUID      string
}

type fakeBdev struct {
	name, uuid, kind string
	aliases          []string
	blockSize        uint32
	numBlocks        uint64
	claim            string // "", "exclusive_write" (nvmf), "read_many_write_one" (lvstore base)
	filename         string // aio
	lvsUUID          string // lvol
	thin             bool   // lvol
	clusters         uint64 // lvol: clusters reserved (0 when thin)
	ctrlr            string // nvme
	nsid             uint32 // nvme
}

type fakeLvs struct {
	uuid, name, base  string
	blockSize         uint32
	clusterSize       uint64
	total, freeClustr uint64
}

type fakeCtrlr struct {
	name    string
	trid    spdk.TransportID
	hostnqn string
	bdevs   []string
}

type fakeSubsystem struct {
	nqn, serial, model  string
	discovery, allowAny bool
	maxNS               uint32
	hosts               []jsonHost
	listeners           []jsonListen
	namespaces          []jsonNS
}

// FakeSPDK is a named fake of an SPDK nvmf_tgt's management state (see the
// package doc). Serve it with Listen(path, fake.Handle, opts).
type FakeSPDK struct {
	mu sync.Mutex
	// guarded by mu:
	seq        uint64
	ticks      uint64
	transports []jsonTransport
	bdevs      []*fakeBdev
	lvstores   []*fakeLvs
	ctrlrs     []*fakeCtrlr
	subsystems []*fakeSubsystem
	keys       []spdk.Key
	remotes    map[string][]FakeNamespace
	calls      map[string]int
	failNext   map[string]*spdk.RPCError
}

// NewFake returns a FakeSPDK in the state of a freshly started nvmf_tgt: no
// transports or bdevs, only the discovery subsystem.
func NewFake() *FakeSPDK {
	return &FakeSPDK{
		subsystems: []*fakeSubsystem{{nqn: "nqn.2014-08.org.nvmexpress.discovery", discovery: true, allowAny: true}},
		remotes:    map[string][]FakeNamespace{},
		calls:      map[string]int{},
		failNext:   map[string]*spdk.RPCError{},
	}
}

func remoteKey(trtype, traddr, trsvcid, subnqn string) string {
	if strings.EqualFold(trtype, "pcie") {
		return "pcie|" + traddr
	}
	return strings.ToLower(trtype) + "|" + traddr + "|" + trsvcid + "|" + subnqn
}

// AddNVMeTarget makes a controller attachable: trtype "pcie" with a PCI
// address, or "tcp" with address, port and subsystem NQN.
func (f *FakeSPDK) AddNVMeTarget(trtype, traddr, trsvcid, subnqn string, ns ...FakeNamespace) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remotes[remoteKey(trtype, traddr, trsvcid, subnqn)] = slices.Clone(ns)
}

// FailNext makes the next call of method fail with e (a fault SPDK cannot be
// made to produce on demand).
func (f *FakeSPDK) FailNext(method string, e *spdk.RPCError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext[method] = e
}

// Calls returns how many times method was called.
func (f *FakeSPDK) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

var readOnly = regexp.MustCompile(`(^|_)get_|_wait_|^spdk_get_version$|^framework_wait_init$`)

// MutatingCalls returns how many calls of methods that change state were made.
func (f *FakeSPDK) MutatingCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for m, c := range f.calls {
		if !readOnly.MatchString(m) {
			n += c
		}
	}
	return n
}

func (f *FakeSPDK) newUUIDLocked() string {
	f.seq++
	return fmt.Sprintf("6b7a11e0-%04x-4000-8000-%012x", f.seq>>48&0xffff, f.seq)
}

// Handle is the fake's HandlerFunc.
func (f *FakeSPDK) Handle(method string, params json.RawMessage) (json.RawMessage, *spdk.RPCError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	if e := f.failNext[method]; e != nil {
		delete(f.failNext, method)
		return nil, e
	}
	h, ok := fakeMethods[method]
	if !ok {
		return nil, errMethod
	}
	res, rerr := h(f, params)
	if rerr != nil {
		return nil, rerr
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, &spdk.RPCError{Code: spdk.CodeInternalError, Message: err.Error()}
	}
	return b, nil
}

// decode decodes params strictly into v; unknown members or wrong types give
// fail (SPDK's spdk_json_decode_object rejects both).
func decode(params json.RawMessage, v any, fail *spdk.RPCError) *spdk.RPCError {
	if len(params) == 0 {
		return fail
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if dec.Decode(v) != nil {
		return fail
	}
	return nil
}

type fakeHandler func(f *FakeSPDK, params json.RawMessage) (any, *spdk.RPCError)

var fakeMethods map[string]fakeHandler

func init() {
	fakeMethods = map[string]fakeHandler{
		"spdk_get_version": func(*FakeSPDK, json.RawMessage) (any, *spdk.RPCError) {
			var v jsonVersion
			v.Version, v.Fields.Major, v.Fields.Minor = "SPDK v26.05", 26, 5
			return v, nil
		},
		"framework_wait_init": func(*FakeSPDK, json.RawMessage) (any, *spdk.RPCError) { return true, nil },
		"rpc_get_methods": func(*FakeSPDK, json.RawMessage) (any, *spdk.RPCError) {
			var out []string
			for m := range fakeMethods {
				out = append(out, m)
			}
			sort.Strings(out)
			return out, nil
		},
		"nvmf_create_transport":          (*FakeSPDK).createTransport,
		"nvmf_get_transports":            (*FakeSPDK).getTransports,
		"bdev_malloc_create":             (*FakeSPDK).mallocCreate,
		"bdev_malloc_delete":             func(f *FakeSPDK, p json.RawMessage) (any, *spdk.RPCError) { return f.deleteBdev(p, kindMalloc) },
		"bdev_aio_create":                (*FakeSPDK).aioCreate,
		"bdev_aio_delete":                func(f *FakeSPDK, p json.RawMessage) (any, *spdk.RPCError) { return f.deleteBdev(p, kindAio) },
		"bdev_get_bdevs":                 (*FakeSPDK).getBdevs,
		"bdev_get_iostat":                (*FakeSPDK).getIostat,
		"bdev_nvme_attach_controller":    (*FakeSPDK).attach,
		"bdev_nvme_detach_controller":    (*FakeSPDK).detach,
		"bdev_nvme_get_controllers":      (*FakeSPDK).getControllers,
		"bdev_lvol_create_lvstore":       (*FakeSPDK).createLvstore,
		"bdev_lvol_get_lvstores":         (*FakeSPDK).getLvstores,
		"bdev_lvol_delete_lvstore":       (*FakeSPDK).deleteLvstore,
		"bdev_lvol_create":               (*FakeSPDK).createLvol,
		"bdev_lvol_delete":               (*FakeSPDK).deleteLvol,
		"nvmf_create_subsystem":          (*FakeSPDK).createSubsystem,
		"nvmf_delete_subsystem":          (*FakeSPDK).deleteSubsystem,
		"nvmf_subsystem_add_ns":          (*FakeSPDK).addNs,
		"nvmf_subsystem_remove_ns":       (*FakeSPDK).removeNs,
		"nvmf_subsystem_add_listener":    func(f *FakeSPDK, p json.RawMessage) (any, *spdk.RPCError) { return f.listener(p, true) },
		"nvmf_subsystem_remove_listener": func(f *FakeSPDK, p json.RawMessage) (any, *spdk.RPCError) { return f.listener(p, false) },
		"nvmf_subsystem_add_host":        func(f *FakeSPDK, p json.RawMessage) (any, *spdk.RPCError) { return f.host(p, true) },
		"nvmf_subsystem_remove_host":     func(f *FakeSPDK, p json.RawMessage) (any, *spdk.RPCError) { return f.host(p, false) },
		"nvmf_get_subsystems":            (*FakeSPDK).getSubsystems,
		"nvmf_subsystem_set_keys":        (*FakeSPDK).setKeys,
		"keyring_file_add_key":           (*FakeSPDK).addKey,
		"keyring_file_remove_key":        (*FakeSPDK).removeKey,
		"keyring_get_keys":               (*FakeSPDK).getKeys,
		"nvmf_subsystem_get_controllers": (*FakeSPDK).getSubsysControllers,
		"nvmf_get_stats":                 (*FakeSPDK).getStats,
	}
}
