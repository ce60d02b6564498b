package target_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

const (
	subNQN  = "nqn.2026-11.io.kvtier:test"
	hostNQN = "nqn.2026-11.io.kvtier:host-a"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newTarget starts a target on 127.0.0.1 with one memory namespace (1 MiB,
// 512-byte blocks) and one O_DIRECT file namespace (4 MiB, 4 KiB blocks).
func newTarget(t testing.TB, cfg target.Config, sub target.Subsystem) (*target.Target, string) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	tg, err := target.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sub.NQN == "" {
		sub.NQN = subNQN
	}
	if sub.Namespaces == nil {
		mem, err := namespace.NewMemory(make([]byte, 1<<20), 512)
		if err != nil {
			t.Fatal(err)
		}
		fc := namespace.FileConfig{Size: 4 << 20}
		f, err := namespace.OpenFile(filepath.Join(t.TempDir(), "ns2.img"), fc)
		if err != nil {
			fc.Buffered = true
			if f, err = namespace.OpenFile(filepath.Join(t.TempDir(), "ns2b.img"), fc); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { f.Close() })
		sub.Namespaces = []namespace.Namespace{mem, f}
	}
	if err := tg.AddSubsystem(sub); err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg, addr.String()
}

func dial(t testing.TB, addr string, cfg initiator.Config) *initiator.Controller {
	t.Helper()
	if cfg.SubNQN == "" {
		cfg.SubNQN = subNQN
	}
	if cfg.HostNQN == "" {
		cfg.HostNQN = hostNQN
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := initiator.Dial(ctx, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawHost is a hand-driven NVMe/TCP host for protocol and fault tests.
type rawHost struct {
	t  testing.TB
	nc net.Conn
	r  *pdu.Reader
	w  *pdu.Writer
	o  pdu.Options
}

func dialRaw(t testing.TB, addr string, hd, dd bool) *rawHost {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	h := &rawHost{t: t, nc: nc, r: pdu.NewReader(nc, pdu.ReaderConfig{Side: pdu.HostSide}), w: pdu.NewWriter(nc)}
	var dg uint8
	if hd {
		dg |= pdu.DigestHeader
	}
	if dd {
		dg |= pdu.DigestData
	}
	h.send(&pdu.ICReq{DGST: dg})
	f, err := h.r.Next()
	if err != nil || f.Type != pdu.TypeICResp {
		t.Fatalf("ICResp: %v", err)
	}
	ic := f.ICResp()
	if ic.DGST != dg || ic.CPDA != 0 || ic.PFV != 0 || ic.MAXH2CDATA != 128<<10 {
		t.Fatalf("ICResp %+v", ic)
	}
	h.o = pdu.Options{HDGST: hd, DDGST: dd}
	h.r.SetNegotiated(h.o)
	h.w.SetOptions(h.o)
	return h
}

func (h *rawHost) send(m pdu.Message) {
	h.t.Helper()
	if err := h.w.Send(m); err != nil {
		h.t.Fatal(err)
	}
}

func (h *rawHost) sendRaw(b []byte) {
	h.t.Helper()
	if _, err := h.nc.Write(b); err != nil {
		h.t.Fatal(err)
	}
}

// next reads one PDU and its data.
func (h *rawHost) next() (*pdu.Frame, []byte) {
	h.t.Helper()
	f, err := h.r.Next()
	if err != nil {
		h.t.Fatalf("read PDU: %v", err)
	}
	var d []byte
	if f.DataLen > 0 {
		if d, err = h.r.Data(); err != nil {
			h.t.Fatal(err)
		}
		d = append([]byte(nil), d...)
	}
	return f, d
}

// resp reads until a CapsuleResp and returns it.
func (h *rawHost) resp() pdu.Completion {
	h.t.Helper()
	for {
		f, _ := h.next()
		if f.Type == pdu.TypeCapsuleResp {
			return f.Completion()
		}
		if f.Type == pdu.TypeC2HData && f.Flags&pdu.FlagSuccess != 0 {
			cccid, _, _, _ := f.DataHeader()
			return pdu.Completion{CID: cccid}
		}
	}
}

func (h *rawHost) connect(qid, cntlid uint16, sub, host string, kato uint32) pdu.Completion {
	h.t.Helper()
	cd := nvme.ConnectData{CNTLID: cntlid, SubNQN: sub, HostNQN: host}
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 100, NSID: uint32(nvme.FabricsConnect),
		SGL: pdu.SGL{Len: 1024, Type: pdu.SGLInCapsule}, CDW10: uint32(qid) << 16, CDW11: 31, CDW12: kato}, Data: cd.Marshal()})
	return h.resp()
}

// enable does Property Set CC.EN=1 on an admin queue.
func (h *rawHost) enable() {
	h.t.Helper()
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 101, NSID: uint32(nvme.FabricsPropSet), CDW11: nvme.PropCC, CDW12: 0x00460001}})
	if c := h.resp(); !c.OK() {
		h.t.Fatalf("enable: status 0x%x", c.Status)
	}
}

// expectTermReq reads until a C2HTermReq and checks FES/FEI, then EOF.
func (h *rawHost) expectTermReq(fes uint16, fei uint32) {
	h.t.Helper()
	for {
		f, err := h.r.Next()
		if err != nil {
			h.t.Fatalf("waiting for C2HTermReq: %v", err)
		}
		if f.Type != pdu.TypeC2HTermReq {
			continue
		}
		tr := f.TermReq()
		if tr.FES != fes || tr.FEI != fei {
			h.t.Fatalf("C2HTermReq FES %d FEI %d, want %d %d", tr.FES, tr.FEI, fes, fei)
		}
		if _, err := h.r.Next(); !errors.Is(err, io.EOF) {
			h.t.Fatalf("after TermReq: %v, want EOF", err)
		}
		return
	}
}

func identifyCmd(cns uint8, nsid uint32) *pdu.CapsuleCmd {
	return &pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.AdminIdentify, Flags: 0x40, CID: 7, NSID: nsid, CDW10: uint32(cns),
		SGL: pdu.SGL{Len: 4096, Type: pdu.SGLTransport}}}
}

func newFakeClock() *clock.Fake { return clock.NewFake(time.Unix(1_800_000_000, 0)) }

func dialTCP(t testing.TB, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { nc.Close() })
	return nc
}
