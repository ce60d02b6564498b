package spdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Namespace is one namespace the Manager exports.
type Namespace struct {
	NSID      uint32
	Bdev      string // SPDK's bdev name (an lvol's is its UUID)
	PlanName  string // the plan's name for it: a bdev name or "<lvs>/<lvol>"
	Size      uint64 // bytes
	BlockSize uint32
	UUID      string
}

// Manager makes an SPDK application match a Plan, idempotently: it reads the
// current state first, reuses objects that already match, creates what is
// missing, and refuses (ErrConflict) to touch an object of a planned name
// whose attributes differ. An "already exists" error is treated as success
// only where it is unambiguous (the TCP transport); nvmf_create_subsystem's
// -32603 "Unable to create subsystem" is also what a malformed NQN gets
// (recordings 17 and 20), so after it the Manager re-reads the subsystem
// instead of trusting the message. Because it reads before it writes, a
// re-run after a partial failure or a lost connection converges.
//
// The Manager holds no state of its own; it is safe for concurrent use, but
// two concurrent Applies of different plans to one SPDK will fight.
type Manager struct {
	c *Client
}

// NewManager returns a Manager driving SPDK through c.
func NewManager(c *Client) *Manager { return &Manager{c: c} }

type export struct {
	planName string
	bdev     Bdev
}

func stepErr(step, name string, err error) error {
	return fmt.Errorf("spdk apply: %s %s: %w", step, name, err)
}

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConflict}, args...)...)
}

// Apply makes SPDK match p and returns the exported namespaces in plan order.
// An invalid plan is refused with kverr.InvalidParams before any call.
func (m *Manager) Apply(ctx context.Context, p Plan) ([]Namespace, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := m.c.FrameworkWaitInit(ctx); err != nil {
		return nil, stepErr("framework_wait_init", "", err)
	}
	if err := m.ensureTransport(ctx, p); err != nil {
		return nil, err
	}
	if err := m.ensureKeys(ctx, p); err != nil {
		return nil, err
	}
	lvsBase := ""
	if p.Lvstore != nil {
		lvsBase = p.Lvstore.BaseBdev
	}
	var exports []export
	add := func(name string, b Bdev) {
		if lvsBase == "" || !b.HasName(lvsBase) {
			exports = append(exports, export{planName: name, bdev: b})
		}
	}
	for _, cs := range p.Controllers {
		bdevs, err := m.ensureController(ctx, cs)
		if err != nil {
			return nil, err
		}
		for _, b := range bdevs {
			add(b.Name, b)
		}
	}
	for _, a := range p.AioFiles {
		b, err := m.ensureAio(ctx, a)
		if err != nil {
			return nil, err
		}
		add(a.Name, b)
	}
	for _, ms := range p.Mallocs {
		b, err := m.ensureMalloc(ctx, ms)
		if err != nil {
			return nil, err
		}
		add(ms.Name, b)
	}
	if p.Lvstore != nil {
		if err := m.ensureLvstore(ctx, *p.Lvstore); err != nil {
			return nil, err
		}
		for _, v := range p.Lvols {
			b, err := m.ensureLvol(ctx, p, v)
			if err != nil {
				return nil, err
			}
			exports = append(exports, export{planName: p.lvolAlias(v), bdev: b})
		}
	}
	return m.ensureSubsystem(ctx, p, exports)
}

// getBdev returns the bdev called name (name, alias or UUID), or found=false.
func (m *Manager) getBdev(ctx context.Context, name string) (Bdev, bool, error) {
	bs, err := m.c.BdevGetBdevs(ctx, BdevGetBdevsParams{Name: name})
	if IsCode(err, ErrnoENODEV) {
		return Bdev{}, false, nil
	}
	if err != nil {
		return Bdev{}, false, err
	}
	if len(bs) != 1 {
		return Bdev{}, false, fmt.Errorf("%w: bdev_get_bdevs %s returned %d bdevs", ErrBadReply, name, len(bs))
	}
	return bs[0], true, nil
}

func (m *Manager) mustBdev(ctx context.Context, name string) (Bdev, error) {
	b, ok, err := m.getBdev(ctx, name)
	if err == nil && !ok {
		err = fmt.Errorf("spdk apply: bdev %s missing right after creation", name)
	}
	return b, err
}

func (m *Manager) ensureTransport(ctx context.Context, p Plan) error {
	ts, err := m.c.NvmfGetTransports(ctx, NvmfGetTransportsParams{})
	if err != nil {
		return stepErr("nvmf_get_transports", "", err)
	}
	for _, t := range ts {
		if strings.EqualFold(t.Trtype, "tcp") {
			return nil
		}
	}
	tp := p.Transport
	tp.Trtype = "TCP"
	err = m.c.NvmfCreateTransport(ctx, tp)
	// Recording 19: -32603 "Transport type 'TCP' already exists" means exactly
	// that the transport we want is there (created concurrently).
	var re *RPCError
	if errors.As(err, &re) && re.Code == CodeInternalError && strings.Contains(re.Message, "already exists") {
		return nil
	}
	if err != nil {
		return stepErr("nvmf_create_transport", "TCP", err)
	}
	return nil
}

// controllerBdevs returns the bdevs "<name>n<nsid>" in NSID order.
func controllerBdevs(all []Bdev, name string) []Bdev {
	type nb struct {
		nsid int
		b    Bdev
	}
	var out []nb
	for _, b := range all {
		if rest, ok := strings.CutPrefix(b.Name, name+"n"); ok {
			if n, err := strconv.Atoi(rest); err == nil && n > 0 {
				out = append(out, nb{n, b})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].nsid < out[j].nsid })
	bs := make([]Bdev, len(out))
	for i := range out {
		bs[i] = out[i].b
	}
	return bs
}

func (m *Manager) ensureController(ctx context.Context, cs ControllerSpec) ([]Bdev, error) {
	ctrls, err := m.c.BdevNvmeGetControllers(ctx, "")
	if err != nil {
		return nil, stepErr("bdev_nvme_get_controllers", "", err)
	}
	pcie := strings.EqualFold(cs.Trtype, "pcie")
	for _, c := range ctrls {
		if c.Name != cs.Name {
			continue
		}
		same := false
		for _, path := range c.Ctrlrs {
			t := path.Trid
			if pcie {
				same = same || (strings.EqualFold(t.Trtype, "pcie") && strings.EqualFold(t.Traddr, cs.Traddr))
			} else {
				same = same || (strings.EqualFold(t.Trtype, "tcp") && t.Traddr == cs.Traddr && t.Trsvcid == cs.Trsvcid && t.Subnqn == cs.Subnqn)
			}
		}
		if !same {
			return nil, conflict("controller %s is attached to a different address", cs.Name)
		}
		all, err := m.c.BdevGetBdevs(ctx, BdevGetBdevsParams{})
		if err != nil {
			return nil, stepErr("bdev_get_bdevs", "", err)
		}
		bs := controllerBdevs(all, cs.Name)
		if len(bs) == 0 {
			return nil, fmt.Errorf("spdk apply: controller %s is attached but has no namespace bdevs", cs.Name)
		}
		return bs, nil
	}
	ap := BdevNvmeAttachControllerParams{Name: cs.Name, Trtype: strings.ToLower(cs.Trtype), Traddr: cs.Traddr}
	if !pcie {
		ap.Adrfam = strings.ToLower(cs.Adrfam)
		if ap.Adrfam == "" {
			ap.Adrfam = "ipv4"
		}
		ap.Trsvcid, ap.Subnqn, ap.Hostnqn = cs.Trsvcid, cs.Subnqn, cs.Hostnqn
	}
	names, err := m.c.BdevNvmeAttachController(ctx, ap)
	if err != nil {
		return nil, stepErr("bdev_nvme_attach_controller", cs.Name, err)
	}
	if len(names) == 0 {
		// Recording 61: SPDK attaches but creates no bdev when the namespace
		// UUIDs collide with bdevs already present. Undo, and say why.
		derr := m.c.BdevNvmeDetachController(ctx, BdevNvmeDetachControllerParams{Name: cs.Name})
		return nil, errors.Join(fmt.Errorf("spdk apply: controller %s attached with no namespace bdevs "+
			"(namespace UUIDs already used by other bdevs?); detached again", cs.Name), derr)
	}
	bs := make([]Bdev, 0, len(names))
	for _, n := range names {
		b, err := m.mustBdev(ctx, n)
		if err != nil {
			return nil, stepErr("bdev_get_bdevs", n, err)
		}
		bs = append(bs, b)
	}
	return bs, nil
}

func aioFilename(b Bdev) string {
	var ds struct {
		Aio struct {
			Filename string `json:"filename"`
		} `json:"aio"`
	}
	json.Unmarshal(b.DriverSpecific, &ds)
	return ds.Aio.Filename
}

func (m *Manager) ensureAio(ctx context.Context, a AioSpec) (Bdev, error) {
	b, ok, err := m.getBdev(ctx, a.Name)
	if err != nil {
		return Bdev{}, stepErr("bdev_get_bdevs", a.Name, err)
	}
	if ok {
		if b.ProductName != "AIO disk" || (a.BlockSize != 0 && b.BlockSize != a.BlockSize) ||
			(aioFilename(b) != "" && aioFilename(b) != a.Filename) {
			return Bdev{}, conflict("bdev %s exists as %q (%s, block size %d)", a.Name, b.ProductName, aioFilename(b), b.BlockSize)
		}
		return b, nil
	}
	if _, err := m.c.BdevAioCreate(ctx, BdevAioCreateParams{Name: a.Name, Filename: a.Filename, BlockSize: a.BlockSize}); err != nil {
		return Bdev{}, stepErr("bdev_aio_create", a.Name, err)
	}
	return m.mustBdev(ctx, a.Name)
}

func (m *Manager) ensureMalloc(ctx context.Context, ms MallocSpec) (Bdev, error) {
	b, ok, err := m.getBdev(ctx, ms.Name)
	if err != nil {
		return Bdev{}, stepErr("bdev_get_bdevs", ms.Name, err)
	}
	bs := ms.blockSize()
	if ok {
		if b.ProductName != "Malloc disk" || b.BlockSize != bs || b.Size() != ms.Size {
			return Bdev{}, conflict("bdev %s exists as %q, %d bytes in %d-byte blocks", ms.Name, b.ProductName, b.Size(), b.BlockSize)
		}
		return b, nil
	}
	if _, err := m.c.BdevMallocCreate(ctx, BdevMallocCreateParams{Name: ms.Name, NumBlocks: ms.Size / uint64(bs), BlockSize: bs}); err != nil {
		return Bdev{}, stepErr("bdev_malloc_create", ms.Name, err)
	}
	return m.mustBdev(ctx, ms.Name)
}

func (m *Manager) findLvstore(ctx context.Context, name string) (Lvstore, bool, error) {
	all, err := m.c.BdevLvolGetLvstores(ctx, LvstoreSelector{})
	if err != nil {
		return Lvstore{}, false, err
	}
	for _, l := range all {
		if l.Name == name {
			return l, true, nil
		}
	}
	return Lvstore{}, false, nil
}

func (m *Manager) ensureLvstore(ctx context.Context, ls LvstoreSpec) error {
	l, ok, err := m.findLvstore(ctx, ls.Name)
	if err != nil {
		return stepErr("bdev_lvol_get_lvstores", ls.Name, err)
	}
	if ok {
		if l.BaseBdev != ls.BaseBdev || (ls.ClusterSize != 0 && l.ClusterSize != uint64(ls.ClusterSize)) {
			return conflict("lvstore %s is on %s with %d-byte clusters", ls.Name, l.BaseBdev, l.ClusterSize)
		}
		return nil
	}
	_, err = m.c.BdevLvolCreateLvstore(ctx, BdevLvolCreateLvstoreParams{BdevName: ls.BaseBdev, LvsName: ls.Name, ClusterSz: ls.ClusterSize})
	if err != nil {
		return stepErr("bdev_lvol_create_lvstore", ls.Name, err)
	}
	return nil
}

func (m *Manager) ensureLvol(ctx context.Context, p Plan, v LvolSpec) (Bdev, error) {
	alias := p.lvolAlias(v)
	b, ok, err := m.getBdev(ctx, alias)
	if err != nil {
		return Bdev{}, stepErr("bdev_get_bdevs", alias, err)
	}
	if ok {
		if b.ProductName != "Logical Volume" || b.Size() < v.SizeMiB<<20 {
			return Bdev{}, conflict("lvol %s exists as %q of %d bytes (plan %d MiB)", alias, b.ProductName, b.Size(), v.SizeMiB)
		}
		return b, nil
	}
	uuid, err := m.c.BdevLvolCreate(ctx, BdevLvolCreateParams{LvolName: v.Name, SizeInMiB: v.SizeMiB,
		LvsName: p.Lvstore.Name, ThinProvision: v.Thin})
	if err != nil {
		return Bdev{}, stepErr("bdev_lvol_create", alias, err)
	}
	return m.mustBdev(ctx, uuid)
}

func (m *Manager) getSubsystem(ctx context.Context, nqn string) (Subsystem, bool, error) {
	ss, err := m.c.NvmfGetSubsystems(ctx, NvmfGetSubsystemsParams{Nqn: nqn})
	if IsCode(err, ErrnoENODEV) {
		return Subsystem{}, false, nil
	}
	if err != nil {
		return Subsystem{}, false, err
	}
	for _, s := range ss {
		if s.Nqn == nqn {
			return s, true, nil
		}
	}
	return Subsystem{}, false, nil
}

func sameListen(a, b ListenAddress) bool {
	return strings.EqualFold(a.Trtype, b.Trtype) && strings.EqualFold(a.Adrfam, b.Adrfam) &&
		a.Traddr == b.Traddr && a.Trsvcid == b.Trsvcid
}

func (m *Manager) ensureSubsystem(ctx context.Context, p Plan, exports []export) ([]Namespace, error) {
	spec := p.Subsystem
	nqn := spec.NQN
	hosts := spec.hosts()
	anyHost := len(hosts) == 0
	s, ok, err := m.getSubsystem(ctx, nqn)
	if err != nil {
		return nil, stepErr("nvmf_get_subsystems", nqn, err)
	}
	if !ok {
		cerr := m.c.NvmfCreateSubsystem(ctx, NvmfCreateSubsystemParams{Nqn: nqn, AllowAnyHost: anyHost,
			SerialNumber: spec.Serial, ModelNumber: spec.Model})
		if s, ok, err = m.getSubsystem(ctx, nqn); err != nil || !ok {
			return nil, stepErr("nvmf_create_subsystem", nqn, errors.Join(cerr, err))
		}
	}
	if (spec.Serial != "" && s.SerialNumber != spec.Serial) || (spec.Model != "" && s.ModelNumber != spec.Model) {
		return nil, conflict("subsystem %s has serial %q model %q", nqn, s.SerialNumber, s.ModelNumber)
	}
	if s.AllowAnyHost != anyHost {
		return nil, conflict("subsystem %s has allow_any_host=%v, plan wants %v", nqn, s.AllowAnyHost, anyHost)
	}
	// Hosts: exactly the plan's, with exactly the plan's keys.
	var have []string
	for _, h := range s.Hosts {
		have = append(have, h.Nqn)
		want := spec.HostKeys[h.Nqn]
		if !slices.Contains(hosts, h.Nqn) || (want.Key == h.DhchapKey && want.CtrlrKey == h.DhchapCtrlrKey) {
			continue
		}
		if err := m.c.NvmfSubsystemSetKeys(ctx, NvmfHostParams{Nqn: nqn, Host: h.Nqn, DhchapKey: want.Key, DhchapCtrlrKey: want.CtrlrKey}); err != nil {
			return nil, stepErr("nvmf_subsystem_set_keys", h.Nqn, err)
		}
	}
	for _, h := range hosts {
		if !slices.Contains(have, h) {
			hk := spec.HostKeys[h]
			if err := m.c.NvmfSubsystemAddHost(ctx, NvmfHostParams{Nqn: nqn, Host: h, DhchapKey: hk.Key, DhchapCtrlrKey: hk.CtrlrKey}); err != nil {
				return nil, stepErr("nvmf_subsystem_add_host", h, err)
			}
		}
	}
	for _, h := range have {
		if !slices.Contains(hosts, h) {
			if err := m.c.NvmfSubsystemRemoveHost(ctx, NvmfHostParams{Nqn: nqn, Host: h}); err != nil {
				return nil, stepErr("nvmf_subsystem_remove_host", h, err)
			}
		}
	}
	// Namespaces: exactly the exports. A namespace reports the bdev's real
	// name, whatever name it was added by.
	nsOf := map[string]uint32{}
	for _, n := range s.Namespaces {
		keep := slices.ContainsFunc(exports, func(e export) bool { return e.bdev.HasName(n.BdevName) })
		if !keep {
			if err := m.c.NvmfSubsystemRemoveNs(ctx, NvmfSubsystemRemoveNsParams{Nqn: nqn, Nsid: n.Nsid}); err != nil {
				return nil, stepErr("nvmf_subsystem_remove_ns", strconv.Itoa(int(n.Nsid)), err)
			}
			continue
		}
		nsOf[n.BdevName] = n.Nsid
	}
	out := make([]Namespace, 0, len(exports))
	for _, e := range exports {
		nsid, ok := nsOf[e.bdev.Name]
		if !ok {
			nsid, err = m.c.NvmfSubsystemAddNs(ctx, NvmfSubsystemAddNsParams{Nqn: nqn, Namespace: NamespaceParams{BdevName: e.bdev.Name}})
			if err != nil {
				return nil, stepErr("nvmf_subsystem_add_ns", e.planName, err)
			}
		}
		out = append(out, Namespace{NSID: nsid, Bdev: e.bdev.Name, PlanName: e.planName, Size: e.bdev.Size(),
			BlockSize: e.bdev.BlockSize, UUID: e.bdev.UUID})
	}
	// Listeners: exactly the plan's one.
	want := p.listen()
	found := false
	for _, la := range s.ListenAddresses {
		if sameListen(la, want) {
			found = true
			continue
		}
		if err := m.c.NvmfSubsystemRemoveListener(ctx, NvmfListenerParams{Nqn: nqn, ListenAddress: la}); err != nil {
			return nil, stepErr("nvmf_subsystem_remove_listener", la.Traddr+":"+la.Trsvcid, err)
		}
	}
	if !found {
		if err := m.c.NvmfSubsystemAddListener(ctx, NvmfListenerParams{Nqn: nqn, ListenAddress: want}); err != nil {
			return nil, stepErr("nvmf_subsystem_add_listener", want.Traddr+":"+want.Trsvcid, err)
		}
	}
	return out, nil
}

// ensureKeys adds the plan's keyring_file keys that SPDK does not hold. A
// key of a planned name with another path (or from another keyring module)
// is a conflict: hosts of other subsystems may use it.
func (m *Manager) ensureKeys(ctx context.Context, p Plan) error {
	if len(p.Keys) == 0 {
		return nil
	}
	have, err := m.c.KeyringGetKeys(ctx)
	if err != nil {
		return stepErr("keyring_get_keys", "", err)
	}
	for _, k := range p.Keys {
		i := slices.IndexFunc(have, func(h Key) bool { return h.Name == k.Name && !h.Removed })
		if i >= 0 {
			if have[i].Module != "keyring_file" || have[i].Path != k.Path {
				return conflict("key %s is %s %q, plan wants keyring_file %q", k.Name, have[i].Module, have[i].Path, k.Path)
			}
			continue
		}
		if err := m.c.KeyringFileAddKey(ctx, KeyringFileKeyParams{Name: k.Name, Path: k.Path}); err != nil {
			return stepErr("keyring_file_add_key", k.Name, err)
		}
	}
	return nil
}

// Teardown removes what p created, in dependency order: the subsystem, the
// lvols, the lvol store, malloc and aio bdevs, NVMe controllers, keys. Objects
// already gone are skipped; an object of a planned name that is not what the
// plan would have created is left alone and reported (ErrConflict). It
// carries on past failures and returns them all joined.
func (m *Manager) Teardown(ctx context.Context, p Plan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var errs []error
	fail := func(step, name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("spdk teardown: %s %s: %w", step, name, err))
		}
	}
	if _, ok, err := m.getSubsystem(ctx, p.Subsystem.NQN); err != nil {
		fail("nvmf_get_subsystems", p.Subsystem.NQN, err)
	} else if ok {
		fail("nvmf_delete_subsystem", p.Subsystem.NQN, m.c.NvmfDeleteSubsystem(ctx, p.Subsystem.NQN))
	}
	if p.Lvstore != nil {
		for _, v := range p.Lvols {
			alias := p.lvolAlias(v)
			if b, ok, err := m.getBdev(ctx, alias); err != nil {
				fail("bdev_get_bdevs", alias, err)
			} else if ok && b.ProductName == "Logical Volume" {
				fail("bdev_lvol_delete", alias, m.c.BdevLvolDelete(ctx, alias))
			}
		}
		if _, ok, err := m.findLvstore(ctx, p.Lvstore.Name); err != nil {
			fail("bdev_lvol_get_lvstores", p.Lvstore.Name, err)
		} else if ok {
			fail("bdev_lvol_delete_lvstore", p.Lvstore.Name, m.c.BdevLvolDeleteLvstore(ctx, LvstoreSelector{LvsName: p.Lvstore.Name}))
		}
	}
	deleteBdev := func(name, product string, del func(context.Context, string) error) {
		b, ok, err := m.getBdev(ctx, name)
		switch {
		case err != nil:
			fail("bdev_get_bdevs", name, err)
		case !ok:
		case b.ProductName != product:
			fail("delete", name, conflict("bdev %s is %q, not %q; left alone", name, b.ProductName, product))
		default:
			fail("delete", name, del(ctx, name))
		}
	}
	for _, ms := range p.Mallocs {
		deleteBdev(ms.Name, "Malloc disk", m.c.BdevMallocDelete)
	}
	for _, a := range p.AioFiles {
		deleteBdev(a.Name, "AIO disk", m.c.BdevAioDelete)
	}
	if len(p.Controllers) > 0 {
		ctrls, err := m.c.BdevNvmeGetControllers(ctx, "")
		fail("bdev_nvme_get_controllers", "", err)
		for _, cs := range p.Controllers {
			if slices.ContainsFunc(ctrls, func(c NvmeController) bool { return c.Name == cs.Name }) {
				fail("bdev_nvme_detach_controller", cs.Name, m.c.BdevNvmeDetachController(ctx, BdevNvmeDetachControllerParams{Name: cs.Name}))
			}
		}
	}
	if len(p.Keys) > 0 {
		have, err := m.c.KeyringGetKeys(ctx)
		fail("keyring_get_keys", "", err)
		for _, k := range p.Keys {
			if slices.ContainsFunc(have, func(h Key) bool {
				return h.Name == k.Name && !h.Removed && h.Module == "keyring_file" && h.Path == k.Path
			}) {
				fail("keyring_file_remove_key", k.Name, m.c.KeyringFileRemoveKey(ctx, k.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// Namespaces returns what the subsystem nqn exports now, with bdev sizes.
func (m *Manager) Namespaces(ctx context.Context, nqn string) ([]Namespace, error) {
	s, ok, err := m.getSubsystem(ctx, nqn)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &RPCError{Code: ErrnoENODEV, Message: "No such device", Method: "nvmf_get_subsystems"}
	}
	out := make([]Namespace, 0, len(s.Namespaces))
	for _, n := range s.Namespaces {
		b, err := m.mustBdev(ctx, n.BdevName)
		if err != nil {
			return nil, err
		}
		out = append(out, Namespace{NSID: n.Nsid, Bdev: b.Name, PlanName: b.Name, Size: b.Size(), BlockSize: b.BlockSize, UUID: b.UUID})
	}
	return out, nil
}
