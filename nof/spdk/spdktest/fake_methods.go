package spdktest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/kvtier/kvtier/nof/spdk"
)

// Method handlers of FakeSPDK; all run with f.mu held.

func (f *FakeSPDK) bdevLocked(name string) *fakeBdev {
	for _, b := range f.bdevs {
		if b.name == name || b.uuid == name || slices.Contains(b.aliases, name) {
			return b
		}
	}
	return nil
}

func (f *FakeSPDK) lvstoreByUUIDLocked(uuid string) *fakeLvs {
	for _, l := range f.lvstores {
		if l.uuid == uuid {
			return l
		}
	}
	return nil
}

func (f *FakeSPDK) lvstoreLocked(sel spdk.LvstoreSelector) *fakeLvs {
	for _, l := range f.lvstores {
		if (sel.UUID != "" && l.uuid == sel.UUID) || (sel.LvsName != "" && l.name == sel.LvsName) {
			return l
		}
	}
	return nil
}

func (f *FakeSPDK) ctrlrByNameLocked(name string) *fakeCtrlr {
	for _, c := range f.ctrlrs {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (f *FakeSPDK) subsystemLocked(nqn string) *fakeSubsystem {
	for _, s := range f.subsystems {
		if s.nqn == nqn {
			return s
		}
	}
	return nil
}

func noSubsystem(nqn string) *spdk.RPCError {
	return &spdk.RPCError{Code: spdk.CodeInvalidParams, Message: "Unable to find subsystem with NQN " + nqn}
}

// removeBdevLocked hot-removes a bdev: namespaces on it disappear from their
// subsystems, as SPDK does on bdev removal.
func (f *FakeSPDK) removeBdevLocked(b *fakeBdev) {
	for _, s := range f.subsystems {
		s.namespaces = slices.DeleteFunc(s.namespaces, func(n jsonNS) bool { return n.BdevName == b.name })
	}
	f.bdevs = slices.DeleteFunc(f.bdevs, func(x *fakeBdev) bool { return x == b })
}

func (f *FakeSPDK) createTransport(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NvmfCreateTransportParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.Trtype == "" {
		return nil, errInvalidParams
	}
	tt := strings.ToUpper(p.Trtype)
	if tt != "TCP" {
		return nil, &spdk.RPCError{Code: spdk.CodeInvalidParams, Message: fmt.Sprintf("Transport type '%s' unavailable.", p.Trtype)}
	}
	for _, t := range f.transports {
		if t.Trtype == tt {
			return nil, &spdk.RPCError{Code: spdk.CodeInternalError, Message: fmt.Sprintf("Transport type '%s' already exists", tt)} // 19
		}
	}
	t := defaultTCPTransport()
	if p.MaxQueueDepth != 0 {
		t.MaxQueueDepth = p.MaxQueueDepth
	}
	if p.MaxIOSize != 0 {
		t.MaxIOSize = p.MaxIOSize
	}
	if p.InCapsuleDataSize != 0 {
		t.InCapsuleDataSize = p.InCapsuleDataSize
	}
	if p.MaxIOQpairsPerCtrlr != 0 {
		t.MaxIOQpairsPerCtrlr = p.MaxIOQpairsPerCtrlr
	}
	if p.C2HSuccess != nil {
		t.C2HSuccess = *p.C2HSuccess
	}
	f.transports = append(f.transports, t)
	return true, nil
}

func (f *FakeSPDK) getTransports(json.RawMessage) (any, *spdk.RPCError) {
	return append([]jsonTransport{}, f.transports...), nil
}

func (f *FakeSPDK) mallocCreate(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.BdevMallocCreateParams
	if e := decode(params, &p, errDecode); e != nil || p.NumBlocks == 0 || p.BlockSize == 0 { // 15
		return nil, errDecode
	}
	if p.BlockSize%512 != 0 {
		return nil, errInvalidParams
	}
	if p.Name == "" {
		for i := 0; ; i++ {
			if p.Name = fmt.Sprintf("Malloc%d", i); f.bdevLocked(p.Name) == nil {
				break
			}
		}
	}
	if f.bdevLocked(p.Name) != nil {
		return nil, errExist
	}
	uuid := p.UUID
	if uuid == "" {
		uuid = f.newUUIDLocked()
	}
	f.bdevs = append(f.bdevs, &fakeBdev{name: p.Name, uuid: uuid, kind: kindMalloc, aliases: []string{uuid},
		blockSize: p.BlockSize, numBlocks: p.NumBlocks})
	return p.Name, nil
}

func (f *FakeSPDK) aioCreate(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.BdevAioCreateParams
	if e := decode(params, &p, errDecode); e != nil || p.Name == "" || p.Filename == "" {
		return nil, errDecode
	}
	if f.bdevLocked(p.Name) != nil {
		return nil, errExist
	}
	fi, err := os.Stat(p.Filename) // a real file: the fake reads its size as SPDK would
	if err != nil {
		return nil, errNoEnt
	}
	bs := p.BlockSize
	if bs == 0 {
		bs = 512
	}
	if bs%512 != 0 || fi.Size() < int64(bs) {
		return nil, &spdk.RPCError{Code: spdk.ErrnoEINVAL, Message: "Invalid argument"}
	}
	uuid := f.newUUIDLocked()
	f.bdevs = append(f.bdevs, &fakeBdev{name: p.Name, uuid: uuid, kind: kindAio, aliases: []string{uuid},
		blockSize: bs, numBlocks: uint64(fi.Size()) / uint64(bs), filename: p.Filename})
	return p.Name, nil
}

func (f *FakeSPDK) deleteBdev(params json.RawMessage, kind string) (any, *spdk.RPCError) {
	var p spdk.NameParams
	if e := decode(params, &p, errInvalidParams); e != nil {
		return nil, e
	}
	b := f.bdevLocked(p.Name)
	if b == nil || b.kind != kind {
		return nil, errNoDev
	}
	if b.claim == "read_many_write_one" { // base of an lvstore: the store goes with it
		for _, l := range f.lvstores {
			if l.base == b.name {
				f.dropLvstoreLocked(l)
			}
		}
	}
	f.removeBdevLocked(b)
	return true, nil
}

func (f *FakeSPDK) getBdevs(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.BdevGetBdevsParams
	if len(params) > 0 {
		if e := decode(params, &p, errInvalidParams); e != nil {
			return nil, e
		}
	}
	out := []jsonBdev{}
	for _, b := range f.bdevs {
		if p.Name == "" || b.name == p.Name || b.uuid == p.Name || slices.Contains(b.aliases, p.Name) {
			out = append(out, f.bdevJSONLocked(b))
		}
	}
	if p.Name != "" && len(out) == 0 {
		return nil, errNoDev // 18
	}
	return out, nil
}

func (f *FakeSPDK) getIostat(params json.RawMessage) (any, *spdk.RPCError) {
	var p struct {
		Name       string   `json:"name"`
		Names      []string `json:"names"`
		PerChannel bool     `json:"per_channel"`
		ResetMode  string   `json:"reset_mode"`
	}
	if len(params) > 0 {
		if e := decode(params, &p, errInvalidParams); e != nil {
			return nil, e
		}
	}
	if p.Name != "" {
		p.Names = append(p.Names, p.Name)
	}
	type stat struct {
		Name         string          `json:"name"`
		BytesRead    uint64          `json:"bytes_read"`
		NumReadOps   uint64          `json:"num_read_ops"`
		BytesWritten uint64          `json:"bytes_written"`
		NumWriteOps  uint64          `json:"num_write_ops"`
		IOError      json.RawMessage `json:"io_error"`
	}
	f.ticks += 1000
	out := struct {
		TickRate uint64 `json:"tick_rate"`
		Ticks    uint64 `json:"ticks"`
		Bdevs    []stat `json:"bdevs"`
	}{TickRate: 2100000000, Ticks: f.ticks, Bdevs: []stat{}}
	for _, b := range f.bdevs {
		if len(p.Names) == 0 || slices.Contains(p.Names, b.name) {
			out.Bdevs = append(out.Bdevs, stat{Name: b.name, IOError: json.RawMessage(`{}`)})
		}
	}
	for _, n := range p.Names {
		if f.bdevLocked(n) == nil {
			return nil, errNoDev
		}
	}
	return out, nil
}

func (f *FakeSPDK) attach(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.BdevNvmeAttachControllerParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.Name == "" || p.Trtype == "" || p.Traddr == "" {
		return nil, errInvalidParams
	}
	if f.ctrlrByNameLocked(p.Name) != nil {
		return nil, errExist
	}
	nss, ok := f.remotes[remoteKey(p.Trtype, p.Traddr, p.Trsvcid, p.Subnqn)]
	if !ok {
		return nil, errIO
	}
	c := &fakeCtrlr{name: p.Name, hostnqn: p.Hostnqn,
		trid: spdk.TransportID{Trtype: p.Trtype, Adrfam: p.Adrfam, Traddr: p.Traddr, Trsvcid: p.Trsvcid, Subnqn: p.Subnqn}}
	names := []string{}
	for _, ns := range nss {
		uuid := ns.UUID
		if uuid == "" {
			uuid = f.newUUIDLocked()
		}
		if f.bdevLocked(uuid) != nil {
			continue // UUID collision: SPDK creates no bdev for it (recording 61)
		}
		n := fmt.Sprintf("%sn%d", p.Name, ns.NSID)
		f.bdevs = append(f.bdevs, &fakeBdev{name: n, uuid: uuid, kind: kindNvme, aliases: []string{uuid},
			blockSize: ns.BlockSize, numBlocks: ns.NumBlocks, ctrlr: p.Name, nsid: ns.NSID})
		names = append(names, n)
	}
	c.bdevs = names
	f.ctrlrs = append(f.ctrlrs, c)
	return names, nil
}

func (f *FakeSPDK) detach(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.BdevNvmeDetachControllerParams
	if e := decode(params, &p, errInvalidParams); e != nil {
		return nil, e
	}
	c := f.ctrlrByNameLocked(p.Name)
	if c == nil {
		return nil, errNoDev
	}
	for _, n := range c.bdevs {
		if b := f.bdevLocked(n); b != nil {
			f.removeBdevLocked(b)
		}
	}
	f.ctrlrs = slices.DeleteFunc(f.ctrlrs, func(x *fakeCtrlr) bool { return x == c })
	return true, nil
}

func (f *FakeSPDK) getControllers(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NameParams
	if len(params) > 0 {
		if e := decode(params, &p, errInvalidParams); e != nil {
			return nil, e
		}
	}
	out := []any{}
	for i, c := range f.ctrlrs {
		if p.Name != "" && c.name != p.Name {
			continue
		}
		out = append(out, map[string]any{"name": c.name, "ctrlrs": []any{map[string]any{
			"state": "enabled", "trid": c.tridJSON(), "cntlid": i + 1,
			"host": map[string]any{"nqn": c.hostnqn, "addr": "", "svcid": "", "no_shn_notification": false}}}})
	}
	if p.Name != "" && len(out) == 0 {
		return nil, errNoDev
	}
	return out, nil
}

func (f *FakeSPDK) createLvstore(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.BdevLvolCreateLvstoreParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.BdevName == "" || p.LvsName == "" {
		return nil, errInvalidParams
	}
	base := f.bdevLocked(p.BdevName)
	if base == nil {
		return nil, errNoDev
	}
	if base.claim != "" {
		return nil, errBusy
	}
	if f.lvstoreLocked(spdk.LvstoreSelector{LvsName: p.LvsName}) != nil {
		return nil, errExist
	}
	cs := uint64(p.ClusterSz)
	if cs == 0 {
		cs = 4 << 20
	}
	size := uint64(base.blockSize) * base.numBlocks
	if cs%uint64(base.blockSize) != 0 || size/cs < 2 {
		return nil, &spdk.RPCError{Code: spdk.ErrnoEINVAL, Message: "Invalid argument"}
	}
	total := size/cs - 1 // one cluster of metadata, as recorded (128 MiB / 1 MiB -> 127)
	l := &fakeLvs{uuid: f.newUUIDLocked(), name: p.LvsName, base: base.name, blockSize: base.blockSize,
		clusterSize: cs, total: total, freeClustr: total}
	base.claim = "read_many_write_one"
	f.lvstores = append(f.lvstores, l)
	return l.uuid, nil
}

func (f *FakeSPDK) getLvstores(params json.RawMessage) (any, *spdk.RPCError) {
	var sel spdk.LvstoreSelector
	if len(params) > 0 {
		if e := decode(params, &sel, errInvalidParams); e != nil {
			return nil, e
		}
	}
	out := []map[string]any{}
	for _, l := range f.lvstores {
		if (sel.UUID != "" && l.uuid != sel.UUID) || (sel.LvsName != "" && l.name != sel.LvsName) {
			continue
		}
		out = append(out, map[string]any{"uuid": l.uuid, "name": l.name, "base_bdev": l.base,
			"total_data_clusters": l.total, "free_clusters": l.freeClustr, "block_size": l.blockSize,
			"cluster_size": l.clusterSize})
	}
	if (sel.UUID != "" || sel.LvsName != "") && len(out) == 0 {
		return nil, errNoDev
	}
	return out, nil
}

func (f *FakeSPDK) dropLvstoreLocked(l *fakeLvs) {
	for _, b := range slices.Clone(f.bdevs) {
		if b.kind == kindLvol && b.lvsUUID == l.uuid {
			f.removeBdevLocked(b)
		}
	}
	if base := f.bdevLocked(l.base); base != nil {
		base.claim = ""
	}
	f.lvstores = slices.DeleteFunc(f.lvstores, func(x *fakeLvs) bool { return x == l })
}

func (f *FakeSPDK) deleteLvstore(params json.RawMessage) (any, *spdk.RPCError) {
	var sel spdk.LvstoreSelector
	if e := decode(params, &sel, errInvalidParams); e != nil || (sel.UUID == "") == (sel.LvsName == "") {
		return nil, errInvalidParams
	}
	l := f.lvstoreLocked(sel)
	if l == nil {
		return nil, errNoDev
	}
	for _, b := range f.bdevs {
		if b.kind == kindLvol && b.lvsUUID == l.uuid && b.claim != "" {
			return nil, errBusy
		}
	}
	f.dropLvstoreLocked(l)
	return true, nil
}

func (f *FakeSPDK) createLvol(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.BdevLvolCreateParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.LvolName == "" || p.SizeInMiB == 0 ||
		(p.LvsName == "") == (p.UUID == "") {
		return nil, errInvalidParams
	}
	l := f.lvstoreLocked(spdk.LvstoreSelector{UUID: p.UUID, LvsName: p.LvsName})
	if l == nil {
		return nil, errNoDev
	}
	alias := l.name + "/" + p.LvolName
	if f.bdevLocked(alias) != nil {
		return nil, errExist
	}
	clusters := (p.SizeInMiB<<20 + l.clusterSize - 1) / l.clusterSize
	reserve := clusters
	if p.ThinProvision {
		reserve = 0
	}
	if reserve > l.freeClustr {
		return nil, errNoSpace
	}
	l.freeClustr -= reserve
	uuid := f.newUUIDLocked()
	f.bdevs = append(f.bdevs, &fakeBdev{name: uuid, uuid: uuid, kind: kindLvol, aliases: []string{alias},
		blockSize: l.blockSize, numBlocks: clusters * l.clusterSize / uint64(l.blockSize), lvsUUID: l.uuid,
		thin: p.ThinProvision, clusters: reserve})
	return uuid, nil
}

func (f *FakeSPDK) deleteLvol(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NameParams
	if e := decode(params, &p, errInvalidParams); e != nil {
		return nil, e
	}
	b := f.bdevLocked(p.Name)
	if b == nil || b.kind != kindLvol {
		return nil, errNoDev
	}
	if b.claim != "" {
		return nil, errBusy
	}
	if l := f.lvstoreByUUIDLocked(b.lvsUUID); l != nil {
		l.freeClustr += b.clusters
	}
	f.removeBdevLocked(b)
	return true, nil
}

// nqnRE is the NQN shape SPDK accepts (spdk_nvmf_valid_nqn): the discovery
// NQN, nqn.yyyy-mm.reverse.domain:anything, or nqn.2014-08.org.nvmexpress:uuid:...
var nqnRE = regexp.MustCompile(`^nqn\.[0-9]{4}-[0-9]{2}\.[A-Za-z0-9][A-Za-z0-9.-]*(:.+)?$`)

func (f *FakeSPDK) createSubsystem(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NvmfCreateSubsystemParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.Nqn == "" { // 16
		return nil, errInvalidParams
	}
	if len(p.SerialNumber) > 20 || len(p.ModelNumber) > 40 {
		return nil, errInvalidParams
	}
	if f.subsystemLocked(p.Nqn) != nil || len(p.Nqn) > 223 || !nqnRE.MatchString(p.Nqn) { // 17, 20
		return nil, &spdk.RPCError{Code: spdk.CodeInternalError, Message: "Unable to create subsystem " + p.Nqn}
	}
	s := &fakeSubsystem{nqn: p.Nqn, serial: p.SerialNumber, model: p.ModelNumber, allowAny: p.AllowAnyHost, maxNS: p.MaxNamespaces}
	if s.serial == "" {
		s.serial = "00000000000000000000"
	}
	if s.model == "" {
		s.model = "SPDK bdev Controller"
	}
	if s.maxNS == 0 {
		s.maxNS = 32
	}
	f.subsystems = append(f.subsystems, s)
	return true, nil
}

func (f *FakeSPDK) deleteSubsystem(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NqnParams
	if e := decode(params, &p, errInvalidParams); e != nil {
		return nil, e
	}
	s := f.subsystemLocked(p.Nqn)
	if s == nil || s.discovery {
		return nil, errNoDev
	}
	for _, n := range s.namespaces {
		if b := f.bdevLocked(n.BdevName); b != nil {
			b.claim = ""
		}
	}
	f.subsystems = slices.DeleteFunc(f.subsystems, func(x *fakeSubsystem) bool { return x == s })
	return true, nil
}

func (f *FakeSPDK) addNs(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NvmfSubsystemAddNsParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.Nqn == "" || p.Namespace.BdevName == "" {
		return nil, errInvalidParams
	}
	s := f.subsystemLocked(p.Nqn)
	if s == nil || s.discovery {
		return nil, noSubsystem(p.Nqn)
	}
	b := f.bdevLocked(p.Namespace.BdevName)
	if b == nil || b.claim != "" { // 21
		return nil, errInvalidParams
	}
	nsid := p.Namespace.Nsid
	used := func(id uint32) bool {
		return slices.ContainsFunc(s.namespaces, func(n jsonNS) bool { return n.Nsid == id })
	}
	if nsid == 0 {
		for nsid = 1; used(nsid); nsid++ {
		}
	}
	if nsid > s.maxNS || used(nsid) {
		return nil, errInvalidParams
	}
	n := jsonNS{Nsid: nsid, BdevName: b.name, Name: b.name, Nguid: p.Namespace.Nguid, Eui64: p.Namespace.Eui64, UUID: p.Namespace.UUID}
	if n.UUID == "" {
		n.UUID = b.uuid
	}
	if n.Nguid == "" {
		n.Nguid = nguidOf(n.UUID)
	}
	b.claim = "exclusive_write"
	s.namespaces = append(s.namespaces, n)
	slices.SortFunc(s.namespaces, func(a, b jsonNS) int { return int(a.Nsid) - int(b.Nsid) })
	return nsid, nil
}

func (f *FakeSPDK) removeNs(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NvmfSubsystemRemoveNsParams
	if e := decode(params, &p, errInvalidParams); e != nil {
		return nil, e
	}
	s := f.subsystemLocked(p.Nqn)
	if s == nil || s.discovery {
		return nil, noSubsystem(p.Nqn)
	}
	i := slices.IndexFunc(s.namespaces, func(n jsonNS) bool { return n.Nsid == p.Nsid })
	if i < 0 {
		return nil, errInvalidParams
	}
	if b := f.bdevLocked(s.namespaces[i].BdevName); b != nil {
		b.claim = ""
	}
	s.namespaces = slices.Delete(s.namespaces, i, i+1)
	return true, nil
}

func (f *FakeSPDK) listener(params json.RawMessage, add bool) (any, *spdk.RPCError) {
	var p spdk.NvmfListenerParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.ListenAddress.Trtype == "" || p.ListenAddress.Traddr == "" {
		return nil, errInvalidParams
	}
	s := f.subsystemLocked(p.Nqn)
	if s == nil {
		return nil, noSubsystem(p.Nqn)
	}
	la := jsonListen{Trtype: strings.ToUpper(p.ListenAddress.Trtype), Adrfam: adrfamName(p.ListenAddress.Adrfam),
		Traddr: p.ListenAddress.Traddr, Trsvcid: p.ListenAddress.Trsvcid}
	i := slices.Index(s.listeners, la)
	if add {
		if i >= 0 || !slices.ContainsFunc(f.transports, func(t jsonTransport) bool { return t.Trtype == la.Trtype }) {
			return nil, errInvalidParams
		}
		s.listeners = append(s.listeners, la)
		return true, nil
	}
	if i < 0 {
		return nil, errInvalidParams
	}
	s.listeners = slices.Delete(s.listeners, i, i+1)
	return true, nil
}

func (f *FakeSPDK) host(params json.RawMessage, add bool) (any, *spdk.RPCError) {
	var p spdk.NvmfHostParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.Host == "" {
		return nil, errInvalidParams
	}
	s := f.subsystemLocked(p.Nqn)
	if s == nil || s.discovery {
		return nil, noSubsystem(p.Nqn)
	}
	i := slices.IndexFunc(s.hosts, func(h jsonHost) bool { return h.Nqn == p.Host })
	switch {
	case add && i >= 0, !add && i < 0:
		return nil, errInvalidParams
	case add:
		if e := f.checkHostKeys(p); e != nil {
			return nil, e
		}
		s.hosts = append(s.hosts, jsonHost{Nqn: p.Host, DhchapKey: p.DhchapKey, DhchapCtrlrKey: p.DhchapCtrlrKey})
		f.refKeys(p, 1)
	default:
		f.refKeys(spdk.NvmfHostParams{DhchapKey: s.hosts[i].DhchapKey, DhchapCtrlrKey: s.hosts[i].DhchapCtrlrKey}, -1)
		s.hosts = slices.Delete(s.hosts, i, i+1)
	}
	return true, nil
}

// checkHostKeys: SPDK answers -32602 when a named key is not in the
// keyring, and when a controller key comes without a host key.
func (f *FakeSPDK) checkHostKeys(p spdk.NvmfHostParams) *spdk.RPCError {
	if p.DhchapCtrlrKey != "" && p.DhchapKey == "" {
		return errInvalidParams
	}
	for _, k := range []string{p.DhchapKey, p.DhchapCtrlrKey} {
		if k != "" && !slices.ContainsFunc(f.keys, func(h spdk.Key) bool { return h.Name == k && !h.Removed }) {
			return errInvalidParams
		}
	}
	return nil
}

func (f *FakeSPDK) refKeys(p spdk.NvmfHostParams, d int) {
	for _, k := range []string{p.DhchapKey, p.DhchapCtrlrKey} {
		if i := slices.IndexFunc(f.keys, func(h spdk.Key) bool { return h.Name == k }); k != "" && i >= 0 {
			f.keys[i].Refcnt += d
		}
	}
}

func (f *FakeSPDK) setKeys(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NvmfHostParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.Host == "" || p.Psk != "" {
		return nil, errInvalidParams
	}
	s := f.subsystemLocked(p.Nqn)
	if s == nil || s.discovery {
		return nil, noSubsystem(p.Nqn)
	}
	i := slices.IndexFunc(s.hosts, func(h jsonHost) bool { return h.Nqn == p.Host })
	if i < 0 {
		return nil, errInvalidParams
	}
	if e := f.checkHostKeys(p); e != nil {
		return nil, e
	}
	f.refKeys(spdk.NvmfHostParams{DhchapKey: s.hosts[i].DhchapKey, DhchapCtrlrKey: s.hosts[i].DhchapCtrlrKey}, -1)
	s.hosts[i] = jsonHost{Nqn: p.Host, DhchapKey: p.DhchapKey, DhchapCtrlrKey: p.DhchapCtrlrKey}
	f.refKeys(p, 1)
	return true, nil
}

// addKey checks the key file the way SPDK's keyring_file module does: an
// absolute path to a file of this process's user without group or other
// permissions.
func (f *FakeSPDK) addKey(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.KeyringFileKeyParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.Name == "" || p.Path == "" {
		return nil, errInvalidParams
	}
	if slices.ContainsFunc(f.keys, func(h spdk.Key) bool { return h.Name == p.Name && !h.Removed }) {
		return nil, errExist
	}
	if !filepath.IsAbs(p.Path) {
		return nil, errPerm
	}
	st, err := os.Stat(p.Path)
	if err != nil {
		return nil, errNoEnt
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, errPerm
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return nil, errPerm
	}
	f.keys = append(f.keys, spdk.Key{Name: p.Name, Module: "keyring_file", Path: p.Path, Probed: false, Refcnt: 1})
	return true, nil
}

func (f *FakeSPDK) removeKey(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.KeyringFileKeyParams
	if e := decode(params, &p, errInvalidParams); e != nil || p.Name == "" || p.Path != "" {
		return nil, errInvalidParams
	}
	i := slices.IndexFunc(f.keys, func(h spdk.Key) bool { return h.Name == p.Name && !h.Removed })
	if i < 0 {
		return nil, errNoDev
	}
	f.keys = slices.Delete(f.keys, i, i+1)
	return true, nil
}

func (f *FakeSPDK) getKeys(json.RawMessage) (any, *spdk.RPCError) {
	return append([]spdk.Key{}, f.keys...), nil
}

// KeyPath returns the file of the keyring key name, and whether the fake
// holds it (for tests).
func (f *FakeSPDK) KeyPath(name string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.keys {
		if k.Name == name {
			return k.Path, true
		}
	}
	return "", false
}

// HostKeys returns the DH-HMAC-CHAP key names of host on subsystem nqn, and
// whether the host is allowed there (for tests).
func (f *FakeSPDK) HostKeys(nqn, host string) (key, ctrlrKey string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.subsystemLocked(nqn)
	if s == nil {
		return "", "", false
	}
	for _, h := range s.hosts {
		if h.Nqn == host {
			return h.DhchapKey, h.DhchapCtrlrKey, true
		}
	}
	return "", "", false
}

func (f *FakeSPDK) getSubsystems(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NvmfGetSubsystemsParams
	if len(params) > 0 {
		if e := decode(params, &p, errInvalidParams); e != nil {
			return nil, e
		}
	}
	out := []any{}
	for _, s := range f.subsystems {
		if p.Nqn == "" || s.nqn == p.Nqn {
			out = append(out, s.toJSON())
		}
	}
	if p.Nqn != "" && len(out) == 0 {
		return nil, errNoDev
	}
	return out, nil
}

func (f *FakeSPDK) getSubsysControllers(params json.RawMessage) (any, *spdk.RPCError) {
	var p spdk.NqnParams
	if e := decode(params, &p, errInvalidParams); e != nil {
		return nil, e
	}
	if f.subsystemLocked(p.Nqn) == nil {
		return nil, noSubsystem(p.Nqn)
	}
	return []any{}, nil // no host ever connects to the fake
}

func (f *FakeSPDK) getStats(json.RawMessage) (any, *spdk.RPCError) {
	tr := []map[string]string{}
	for _, t := range f.transports {
		tr = append(tr, map[string]string{"trtype": t.Trtype})
	}
	pg := map[string]any{"name": "nvmf_tgt_poll_group_000", "admin_qpairs": 0, "io_qpairs": 0,
		"current_admin_qpairs": 0, "current_io_qpairs": 0, "current_unassociated_qpairs": 0,
		"pending_bdev_io": 0, "completed_nvme_io": 0, "transports": tr}
	return map[string]any{"tick_rate": 2100000000, "poll_groups": []any{pg}}, nil
}
