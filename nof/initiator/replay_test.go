package initiator_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/kvtier/kvtier/internal/shared"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/internal/pcapio"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
)

var vectors = shared.Path("nvme-tcp-vectors")

// recorded is one SPDK host command from a capture and SPDK's replies.
type recorded struct {
	cmd     []byte   // the SPDK host's CapsuleCmd
	h2c     [][]byte // the SPDK host's H2CData PDUs for it
	replies [][]byte // SPDK target PDUs answering it, in order
}

// signature identifies "the same command" across hosts.
func signature(admin bool, c pdu.Command) string {
	s := fmt.Sprintf("admin=%v op=%02x", admin, c.Opcode)
	if c.Opcode == nvme.OpcodeFabrics {
		s += fmt.Sprintf(" fc=%d", c.FabricsType())
		if c.FabricsType() != nvme.FabricsConnect {
			s += fmt.Sprintf(" ofst=%x", c.CDW11)
		}
		return s
	}
	if !admin {
		if c.Opcode == nvme.CmdWrite || c.Opcode == nvme.CmdRead {
			s += fmt.Sprintf(" len=%d", c.SGL.Len)
		}
		return s
	}
	switch c.Opcode {
	case nvme.AdminIdentify:
		s += fmt.Sprintf(" cns=%d", uint8(c.CDW10))
	case nvme.AdminGetLogPage:
		s += fmt.Sprintf(" lid=%d len=%d", uint8(c.CDW10), c.SGL.Len)
	case nvme.AdminSetFeatures, nvme.AdminGetFeatures:
		s += fmt.Sprintf(" fid=%d", uint8(c.CDW10))
	}
	return s
}

// library maps command signatures to SPDK's recorded answers, each used in
// capture order (Property Get CSTS answers 0, then 1, then 9).
type library struct {
	mu     sync.Mutex
	byKey  map[string][]recorded
	icresp []byte
	icreq  []byte
}

func loadLibrary(t *testing.T, captures ...string) *library {
	lib := &library{byKey: map[string][]recorded{}}
	for _, name := range captures {
		pdus, err := pcapio.NVMeTCPPDUs(filepath.Join(vectors, "pcap", name))
		if err != nil {
			t.Skipf("capture %s unavailable: %v", name, err)
		}
		type key struct {
			conn int
			cid  uint16
		}
		open := map[key]*recorded{}
		keys := map[key]string{}
		admin := map[int]bool{}
		for _, p := range pdus {
			h := pdu.ParseHeader(p.Raw)
			switch h.Type {
			case pdu.TypeICReq:
				lib.icreq = p.Raw
			case pdu.TypeICResp:
				lib.icresp = p.Raw
			case pdu.TypeCapsuleCmd:
				var c pdu.Command
				c.Unmarshal(p.Raw[8:72])
				if c.Opcode == nvme.OpcodeFabrics && c.FabricsType() == nvme.FabricsConnect {
					admin[p.Conn] = c.CDW10>>16 == 0
				}
				k := key{p.Conn, c.CID}
				if r := open[k]; r != nil {
					lib.byKey[keys[k]] = append(lib.byKey[keys[k]], *r)
				}
				open[k] = &recorded{cmd: p.Raw}
				keys[k] = signature(admin[p.Conn], c)
			case pdu.TypeH2CData:
				if r := open[key{p.Conn, binary.LittleEndian.Uint16(p.Raw[8:])}]; r != nil {
					r.h2c = append(r.h2c, p.Raw)
				}
			case pdu.TypeCapsuleResp, pdu.TypeC2HData, pdu.TypeR2T:
				off := 8
				if h.Type == pdu.TypeCapsuleResp {
					off = 20
				}
				if r := open[key{p.Conn, binary.LittleEndian.Uint16(p.Raw[off:])}]; r != nil {
					r.replies = append(r.replies, p.Raw)
				}
			}
		}
		for k, r := range open {
			lib.byKey[keys[k]] = append(lib.byKey[keys[k]], *r)
		}
	}
	return lib
}

func (l *library) take(sig string) (recorded, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.byKey[sig]
	if len(rs) == 0 {
		return recorded{}, false
	}
	// keep the last answer for repeated use (reads, keep-alives)
	if len(rs) > 1 {
		l.byKey[sig] = rs[1:]
	}
	return rs[0], true
}

// withCID rewrites the command id in a recorded reply and re-encodes it.
func withCID(raw []byte, cid uint16) []byte {
	m, err := pdu.Decode(raw)
	if err != nil {
		panic(err)
	}
	switch v := m.(type) {
	case *pdu.CapsuleResp:
		v.Cpl.CID = cid
	case *pdu.C2HData:
		v.CCCID = cid
	case *pdu.R2T:
		v.CCCID = cid
	}
	return m.AppendPDU(nil, pdu.OptionsOf(raw))
}

// serveRecorded answers our initiator with SPDK's recorded PDUs and checks
// what it sends against what SPDK's host sent for the same command.
func serveRecorded(t *testing.T, ln net.Listener, lib *library, mismatches *[]string, mu *sync.Mutex) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer nc.Close()
			r := pdu.NewReader(nc, pdu.ReaderConfig{Side: pdu.AnySide, MaxCapsuleData: 8192, MaxH2CData: 1 << 20})
			note := func(format string, args ...any) {
				mu.Lock()
				*mismatches = append(*mismatches, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			f, err := r.Next()
			if err != nil {
				return
			}
			if ic := (&pdu.ICReq{}); f.Type == pdu.TypeICReq {
				*ic = f.ICReq()
				if got := ic.AppendPDU(nil, pdu.Options{}); !bytes.Equal(got, lib.icreq) {
					note("ICReq ours %x, SPDK host %x", got, lib.icreq)
				}
			}
			nc.Write(lib.icresp)
			isAdmin := false
			for {
				f, err := r.Next()
				if err != nil {
					return
				}
				if f.Type != pdu.TypeCapsuleCmd {
					note("unexpected %v from initiator", f.Type)
					return
				}
				cmd := f.Command()
				var data []byte
				if f.DataLen > 0 {
					d, err := r.Data()
					if err != nil {
						return
					}
					data = append([]byte(nil), d...)
				}
				if cmd.Opcode == nvme.OpcodeFabrics && cmd.FabricsType() == nvme.FabricsConnect {
					isAdmin = cmd.CDW10>>16 == 0
				}
				sig := signature(isAdmin, cmd)
				rec, ok := lib.take(sig)
				if !ok {
					note("no SPDK recording for %s", sig)
					return
				}
				var spdk pdu.Command
				spdk.Unmarshal(rec.cmd[8:72])
				mine := cmd
				mine.CID, spdk.CID = 0, 0
				if cmd.Opcode == nvme.CmdRead || cmd.Opcode == nvme.CmdWrite {
					mine.CDW10, mine.CDW11, spdk.CDW10, spdk.CDW11 = 0, 0, 0, 0 // SLBA: workload choice
				}
				if cmd.Opcode == nvme.AdminSetFeatures && uint8(cmd.CDW10) == nvme.FeatNumQueues {
					mine.CDW11, spdk.CDW11 = 0, 0 // number of queues asked: configuration choice
				}
				if cmd.Opcode == nvme.OpcodeFabrics && cmd.FabricsType() == nvme.FabricsPropSet {
					mine.CDW12, spdk.CDW12 = mine.CDW12&^1, spdk.CDW12&^1
				}
				if mine.SGL.Len == 0 && spdk.SGL.Len == 0 {
					mine.SGL.Type, spdk.SGL.Type = 0, 0 // no data: SPDK uses 0x01 or 0x5A, both valid
				}
				if !isAdmin && cmd.Opcode == nvme.OpcodeFabrics {
					mine.CDW12, spdk.CDW12 = 0, 0 // KATO only means something on the admin queue; SPDK repeats it
				}
				if cmd.Opcode == nvme.OpcodeFabrics && cmd.FabricsType() == nvme.FabricsConnect {
					m, _ := pdu.Decode(rec.cmd)
					a, _ := nvme.ParseConnectData(data)
					b, _ := nvme.ParseConnectData(m.(*pdu.CapsuleCmd).Data)
					a.HostID, b.HostID = [16]byte{}, [16]byte{}
					// spdk_nvme_identify connected with its default
					// nqn.2014-08.org.nvmexpress:uuid:... host NQN
					a.HostNQN, b.HostNQN = "", ""
					if !isAdmin {
						a.CNTLID, b.CNTLID = 0, 0 // each controller's own CNTLID
					}
					if a != b {
						note("Connect data ours %+v, SPDK host's %+v", a, b)
					}
				}
				if mine != spdk {
					note("%s: our SQE %+v, SPDK host's %+v", sig, mine, spdk)
				}
				for _, rep := range rec.replies {
					if pdu.Type(rep[0]) == pdu.TypeCapsuleResp && len(rec.h2c) > 0 {
						// the write's data must arrive before its completion
						for _, want := range rec.h2c {
							hf, err := r.Next()
							if err != nil {
								return
							}
							got := append([]byte(nil), hf.Raw()...)
							if _, err := r.Data(); err != nil {
								return
							}
							w := append([]byte(nil), want[:24]...)
							binary.LittleEndian.PutUint16(w[8:], 0)
							binary.LittleEndian.PutUint16(got[8:], 0)
							if !bytes.Equal(got, w) {
								note("H2CData header ours %x, SPDK host %x", got, w)
							}
						}
					}
					nc.Write(withCID(rep, cmd.CID))
				}
			}
		}()
	}
}

// TestReplayTargetSide drives our initiator with SPDK's recorded target
// PDUs: bring-up and identify from identify.pcap, 4 KiB reads from
// perf-randread-4k.pcap, a 128 KiB write via R2T from perf-write-128k.pcap,
// and checks the commands it sends equal the SPDK host's. Masked: CID,
// SLBA, the number of queues asked, HOSTID and host NQN (each host chooses
// them); the SGL
// type of commands without data (SPDK uses 0x01 or 0x5A, both valid); KATO
// in I/O-queue Connects (only meaningful on the admin queue, SPDK repeats it).
func TestReplayTargetSide(t *testing.T) {
	lib := loadLibrary(t, "identify.pcap", "perf-randread-4k.pcap", "perf-write-128k.pcap")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var mismatches []string
	go serveRecorded(t, ln, lib, &mismatches, &mu)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, ln.Addr().String(), initiator.Config{SubNQN: "nqn.2026-11.io.kvtier:test", HostNQN: "nqn.2026-11.io.kvtier:host-lab"})
	if err != nil {
		t.Fatal(err)
	}
	id := c.Identify()
	if id.Serial != "KVTIER0000000001" || id.Model != "kvtier lab malloc" || id.SubNQN != "nqn.2026-11.io.kvtier:test" || id.MDTS != 5 {
		t.Fatalf("identify from SPDK's bytes: %+v", id)
	}
	ns := c.Namespaces()
	if len(ns) != 1 || ns[0].Blocks != 131072 || ns[0].BlockSize != 512 {
		t.Fatalf("namespaces from SPDK's bytes: %+v", ns)
	}
	want := [16]byte{0x12, 0xA3, 0xE9, 0xF9, 0x19, 0x84, 0x41, 0x17, 0xBA, 0x9D, 0x94, 0x24, 0x1D, 0x28, 0xBD, 0x9F}
	if ns[0].NGUID != want {
		t.Fatalf("NGUID %x, want the lab's %x", ns[0].NGUID, want)
	}
	p := bytes.Repeat([]byte{0xFF}, 4096)
	if err := c.ReadAt(ctx, 1, p, 8192); err != nil || !bytes.Equal(p, make([]byte, 4096)) {
		t.Fatalf("read with SPDK's C2HData (SUCCESS, no CQE): %v", err)
	}
	if err := c.WriteAt(ctx, 1, make([]byte, 128<<10), 0); err != nil {
		t.Fatalf("128 KiB write through SPDK's R2T: %v", err)
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	for _, m := range mismatches {
		t.Error(m)
	}
}
