package target_test

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/internal/pcapio"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

// logPageCmd is Get Log Page lid for n bytes from byte offset off.
func logPageCmd(cid uint16, lid uint8, n int, off uint64) *pdu.CapsuleCmd {
	numd := uint32(n/4 - 1)
	return &pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.AdminGetLogPage, Flags: 0x40, CID: cid, NSID: 0xFFFFFFFF,
		CDW10: uint32(lid) | numd<<16, CDW11: numd >> 16, CDW12: uint32(off), CDW13: uint32(off >> 32),
		SGL: pdu.SGL{Len: uint32(n), Type: pdu.SGLTransport}}}
}

// adminData sends cmd and returns its data (nil if none) and completion.
func (h *rawHost) adminData(cmd pdu.Message) ([]byte, pdu.Completion) {
	h.t.Helper()
	h.send(cmd)
	var data []byte
	for {
		f, d := h.next()
		switch {
		case f.Type == pdu.TypeC2HData:
			data = append(data, d...)
			if f.Flags&pdu.FlagSuccess != 0 {
				cccid, _, _, _ := f.DataHeader()
				return data, pdu.Completion{CID: cccid}
			}
		case f.Type == pdu.TypeCapsuleResp:
			return data, f.Completion()
		}
	}
}

// spdkDiscoveryIdentify returns the Identify Controller data SPDK v26.05's
// discovery controller sent in the lab capture (discovery.pcap).
func spdkDiscoveryIdentify(t *testing.T) []byte {
	t.Helper()
	if vectors == "" {
		t.Skip("no shared nvme-tcp-vectors folder: the comparison with SPDK's capture is skipped")
	}
	pdus, err := pcapio.NVMeTCPPDUs(filepath.Join(vectors, "pcap", "discovery.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pdus {
		if p.Dir == 1 && pdu.Type(p.Raw[0]) == pdu.TypeC2HData && len(p.Raw) == 24+4096 {
			return p.Raw[24:]
		}
	}
	t.Fatal("no Identify Controller data in discovery.pcap")
	return nil
}

// TestDiscoveryControllerIdentifyAndLogs checks the discovery controller
// against the specification and SPDK's capture: it advertises (LPA) only
// what it serves, serves the discovery log (also from an offset, which LPA
// bit 2 promises), and refuses the pages an NVM controller has.
func TestDiscoveryControllerIdentifyAndLogs(t *testing.T) {
	spdk := spdkDiscoveryIdentify(t)
	_, addr := newTarget(t, target.Config{}, target.Subsystem{})
	h := dialRaw(t, addr, false, false)
	if cpl := h.connect(0, 0xFFFF, nvme.DiscoveryNQN, hostNQN, 0); !cpl.OK() {
		t.Fatalf("discovery connect: status 0x%x", cpl.Status)
	}
	h.enable()
	data, cpl := h.adminData(identifyCmd(1, 0))
	if !cpl.OK() || len(data) != 4096 {
		t.Fatalf("identify: status 0x%x, %d bytes", cpl.Status, len(data))
	}
	id, err := nvme.ParseIdentifyController(data)
	if err != nil {
		t.Fatal(err)
	}
	if id.CtrlType != nvme.CtrlTypeDiscovery || id.SubNQN != nvme.DiscoveryNQN {
		t.Fatalf("discovery identify %+v", id)
	}
	// Field by field with SPDK's discovery controller where the
	// specification leaves no choice for a controller serving only 0x70.
	for _, f := range []struct {
		name string
		off  int
	}{{"CNTRLTYPE", 111}, {"LPA", 261}, {"FRMW", 260}, {"OACS", 256}, {"ONCS", 520}, {"SQES", 512}, {"CQES", 513}} {
		if data[f.off] != spdk[f.off] {
			t.Errorf("%s (byte %d) = %#x, SPDK's discovery controller %#x", f.name, f.off, data[f.off], spdk[f.off])
		}
	}
	if id.LPA&0x02 != 0 {
		t.Fatalf("discovery controller advertises Commands Supported and Effects (LPA %#x)", id.LPA)
	}
	// Every log page LPA promises is served; the others are refused with
	// SCT 1 SC 09h (Invalid Log Page).
	for _, lid := range []uint8{nvme.LogError, nvme.LogSMART, nvme.LogFirmware, nvme.LogEffects} {
		if _, cpl := h.adminData(logPageCmd(9, lid, 512, 0)); cpl.SCT() != 1 || cpl.SC() != nvme.SCInvalidLogPage {
			t.Fatalf("log page %#x on the discovery controller: SCT %d SC %#x, want 1 / 0x09", lid, cpl.SCT(), cpl.SC())
		}
	}
	whole, cpl := h.adminData(logPageCmd(10, nvme.LogDiscovery, 2048, 0))
	if !cpl.OK() || binary.LittleEndian.Uint64(whole[8:]) != 1 {
		t.Fatalf("discovery log: status 0x%x numrec %d", cpl.Status, binary.LittleEndian.Uint64(whole[8:]))
	}
	// LPA bit 2: a host may read the page in pieces from an offset.
	tail, cpl := h.adminData(logPageCmd(11, nvme.LogDiscovery, 1024, 1024))
	if !cpl.OK() || string(tail) != string(whole[1024:]) {
		t.Fatalf("discovery log from offset 1024: status 0x%x, entry differs", cpl.Status)
	}

	// The NVM controller keeps LPA bit 1 and serves page 05h.
	n := dialRaw(t, addr, false, false)
	if cpl := n.connect(0, 0xFFFF, subNQN, hostNQN, 0); !cpl.OK() {
		t.Fatalf("connect: status 0x%x", cpl.Status)
	}
	n.enable()
	data, _ = n.adminData(identifyCmd(1, 0))
	if nid, err := nvme.ParseIdentifyController(data); err != nil || nid.LPA&0x06 != 0x06 {
		t.Fatalf("NVM controller LPA %#x (%v), want bits 1 and 2", nid.LPA, err)
	}
	eff, cpl := n.adminData(logPageCmd(12, nvme.LogEffects, 4096, 0))
	if !cpl.OK() || binary.LittleEndian.Uint32(eff[1024+4*int(nvme.CmdRead):])&1 == 0 {
		t.Fatalf("effects log on the NVM controller: status 0x%x", cpl.Status)
	}
}

// TestConnectEmptyHostNQN: SPDK's tools send an empty Host NQN unless told
// one. A subsystem open to any host (and the discovery subsystem) accepts
// it; one with an allow list refuses it as a host not allowed; a Host NQN
// that is not empty and not an NQN stays an invalid parameter.
func TestConnectEmptyHostNQN(t *testing.T) {
	tg, addr := newTarget(t, target.Config{}, target.Subsystem{})
	mem, _ := namespace.NewMemory(make([]byte, 64<<10), 512)
	const private = "nqn.2026-11.io.kvtier:private"
	if err := tg.AddSubsystem(target.Subsystem{NQN: private, AllowHosts: []string{hostNQN}, Namespaces: []namespace.Namespace{mem}}); err != nil {
		t.Fatal(err)
	}

	// Open subsystem: admin and I/O queue, then a read.
	h := dialRaw(t, addr, false, false)
	cpl := h.connect(0, 0xFFFF, subNQN, "", 0)
	if !cpl.OK() {
		t.Fatalf("empty host NQN to an open subsystem: SCT %d SC %#x", cpl.SCT(), cpl.SC())
	}
	cntlid := uint16(cpl.DW0)
	h.enable()
	io := dialRaw(t, addr, false, false)
	if cpl := io.connect(1, cntlid, subNQN, "", 0); !cpl.OK() {
		t.Fatalf("I/O queue with an empty host NQN: SCT %d SC %#x", cpl.SCT(), cpl.SC())
	}
	data, cpl := io.adminData(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.CmdRead, Flags: 0x40, CID: 3, NSID: 1,
		SGL: pdu.SGL{Len: 512, Type: pdu.SGLTransport}}})
	if !cpl.OK() || len(data) != 512 {
		t.Fatalf("read with an empty host NQN: status 0x%x, %d bytes", cpl.Status, len(data))
	}
	if hs := tg.Stats().Hosts; len(hs) != 1 || hs[0].HostNQN != "" {
		t.Fatalf("hosts %+v", hs)
	}

	// Subsystem with an allow list: refused as a host not allowed.
	p := dialRaw(t, addr, false, false)
	cpl = p.connect(0, 0xFFFF, private, "", 0)
	if cpl.SCT() != 1 || cpl.SC() != nvme.SCConnectInvalidHost || cpl.DW0 != 1<<16|512 {
		t.Fatalf("empty host NQN to an allow-listed subsystem: SCT %d SC %#x DW0 %#x", cpl.SCT(), cpl.SC(), cpl.DW0)
	}

	// Discovery: accepted, and lists only the open subsystem.
	d := dialRaw(t, addr, false, false)
	if cpl := d.connect(0, 0xFFFF, nvme.DiscoveryNQN, "", 0); !cpl.OK() {
		t.Fatalf("discovery with an empty host NQN: SCT %d SC %#x", cpl.SCT(), cpl.SC())
	}
	d.enable()
	log, cpl := d.adminData(logPageCmd(4, nvme.LogDiscovery, 3072, 0))
	if !cpl.OK() || binary.LittleEndian.Uint64(log[8:]) != 1 {
		t.Fatalf("discovery log for an empty host: status 0x%x, %d records", cpl.Status, binary.LittleEndian.Uint64(log[8:]))
	}

	// Not empty and not an NQN: invalid parameter, IPO 512.
	b := dialRaw(t, addr, false, false)
	cpl = b.connect(0, 0xFFFF, subNQN, "not-an-nqn", 0)
	if cpl.SCT() != 1 || cpl.SC() != nvme.SCConnectInvalidParam || cpl.DW0 != 1<<16|512 {
		t.Fatalf("bad host NQN: SCT %d SC %#x DW0 %#x", cpl.SCT(), cpl.SC(), cpl.DW0)
	}

	// An allow list cannot name the empty host.
	err := tg.AddSubsystem(target.Subsystem{NQN: "nqn.2026-11.io.kvtier:x", AllowHosts: []string{""}, Namespaces: []namespace.Namespace{mem}})
	if !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("allow list with an empty host: %v", err)
	}
}
