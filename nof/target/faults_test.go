package target_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

// healthyHost keeps doing verified I/O on its own controller until stop;
// it proves a misbehaving host never disturbs the others.
func healthyHost(t *testing.T, addr string) (stop func() int64) {
	c := dial(t, addr, initiator.Config{HostNQN: "nqn.2026-11.io.kvtier:healthy", HeaderDigest: true, DataDigest: true})
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := bytes.Repeat([]byte{0x5A}, 8192)
		got := make([]byte, 8192)
		for ctx.Err() == nil {
			off := int64(n.Load()%64) * 8192
			if err := c.WriteAt(ctx, 1, p, off); err != nil {
				if ctx.Err() == nil {
					t.Errorf("healthy host write: %v", err)
				}
				return
			}
			if err := c.ReadAt(ctx, 1, got, off); err != nil || !bytes.Equal(got, p) {
				if ctx.Err() == nil {
					t.Errorf("healthy host read: %v", err)
				}
				return
			}
			n.Add(1)
		}
	}()
	return func() int64 { cancel(); wg.Wait(); return n.Load() }
}

// adminConnected returns a raw host with an enabled admin queue.
func adminConnected(t *testing.T, addr string, hd, dd bool) (*rawHost, uint16) {
	h := dialRaw(t, addr, hd, dd)
	cpl := h.connect(0, 0xFFFF, subNQN, hostNQN, 0)
	if !cpl.OK() {
		t.Fatalf("connect: %+v", cpl)
	}
	h.enable()
	return h, uint16(cpl.DW0)
}

// ioConnected returns a raw host connected as I/O queue 1.
func ioConnected(t *testing.T, addr string, hd, dd bool) *rawHost {
	_, cntlid := adminConnected(t, addr, false, false)
	h := dialRaw(t, addr, hd, dd)
	if cpl := h.connect(1, cntlid, subNQN, hostNQN, 0); !cpl.OK() {
		t.Fatalf("io connect: %+v", cpl)
	}
	return h
}

func writeCmd(cid uint16, slba uint64, blocks int, sglType uint8, length int) pdu.Command {
	return pdu.Command{Opcode: nvme.CmdWrite, Flags: 0x40, CID: cid, NSID: 1, CDW10: uint32(slba), CDW12: uint32(blocks - 1),
		SGL: pdu.SGL{Len: uint32(length), Type: sglType}}
}

func TestBadPDUs(t *testing.T) {
	_, addr := newTarget(t, target.Config{}, target.Subsystem{})
	stop := healthyHost(t, addr)
	cases := []struct {
		name   string
		hd, dd bool
		io     bool
		send   func(h *rawHost)
		fes    uint16
		fei    uint32
	}{
		{"header digest", true, false, false, func(h *rawHost) {
			b := identifyCmd(1, 0).AppendPDU(nil, h.o)
			b[72] ^= 0xFF
			h.sendRaw(b)
		}, pdu.FESHeaderDigest, 0},
		{"plen too large", false, false, false, func(h *rawHost) {
			b := identifyCmd(1, 0).AppendPDU(nil, h.o)
			binary.LittleEndian.PutUint32(b[4:], 64<<20)
			h.sendRaw(b)
		}, pdu.FESInvalidHeaderField, 4},
		{"unknown PDU type", false, false, false, func(h *rawHost) {
			b := identifyCmd(1, 0).AppendPDU(nil, h.o)
			b[0] = 0x0B
			h.sendRaw(b)
		}, pdu.FESInvalidHeaderField, 0},
		{"R2T from host", false, false, false, func(h *rawHost) {
			h.send(&pdu.R2T{R2TL: 4})
		}, pdu.FESInvalidHeaderField, 0},
		{"bad pdo", false, false, true, func(h *rawHost) {
			b := (&pdu.CapsuleCmd{Cmd: writeCmd(1, 0, 1, pdu.SGLInCapsule, 512), Data: make([]byte, 512)}).AppendPDU(nil, h.o)
			b[3] = 74 // not a multiple of 4
			h.sendRaw(b)
		}, pdu.FESInvalidHeaderField, 3},
		{"wrong hlen", false, false, false, func(h *rawHost) {
			b := identifyCmd(1, 0).AppendPDU(nil, h.o)
			b[2] = 64
			h.sendRaw(b)
		}, pdu.FESInvalidHeaderField, 2},
		{"H2CData unknown ttag", false, false, true, func(h *rawHost) {
			h.send(&pdu.H2CData{CCCID: 1, TTAG: 999, Last: true, Data: make([]byte, 512)})
		}, pdu.FESInvalidHeaderField, 10},
		{"H2CData outside R2T", false, false, true, func(h *rawHost) {
			h.send(&pdu.CapsuleCmd{Cmd: writeCmd(3, 0, 16, pdu.SGLTransport, 8192)})
			f, _ := h.next()
			if f.Type != pdu.TypeR2T {
				t.Fatalf("expected R2T, got %v", f.Type)
			}
			r := f.R2T()
			h.send(&pdu.H2CData{CCCID: 3, TTAG: r.TTAG, DATAO: 4096, Last: true, Data: make([]byte, 8192)})
		}, pdu.FESDataOutOfRange, 12},
		{"H2CData over MAXH2CDATA", false, false, true, func(h *rawHost) {
			h.send(&pdu.H2CData{CCCID: 1, TTAG: 0, Last: true, Data: make([]byte, 256<<10)})
		}, pdu.FESDataLimitExceeded, 16},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h *rawHost
			if c.io {
				h = ioConnected(t, addr, c.hd, c.dd)
			} else {
				h, _ = adminConnected(t, addr, c.hd, c.dd)
			}
			c.send(h)
			h.expectTermReq(c.fes, c.fei)
		})
	}
	t.Run("ICReq PFV 1", func(t *testing.T) {
		h := &rawHost{t: t}
		nc := dialTCP(t, addr)
		h.nc, h.r = nc, pdu.NewReader(nc, pdu.ReaderConfig{Side: pdu.HostSide})
		icreq := (&pdu.ICReq{PFV: 1}).AppendPDU(nil, pdu.Options{})
		h.sendRaw(icreq)
		f, data := h.next()
		tr := f.TermReq()
		if f.Type != pdu.TypeC2HTermReq || f.PLEN != 152 || tr.FES != 1 || tr.FEI != 8 || !bytes.Equal(data, icreq) {
			t.Fatalf("term req %+v %+v data %x", f.Header, tr, data)
		}
	})
	if n := stop(); n == 0 {
		t.Fatal("healthy host made no progress")
	}
}

// TestDataDigestError: a data digest mismatch fails only that command
// (Transient Transport Error) and the connection keeps working.
func TestDataDigestError(t *testing.T) {
	_, addr := newTarget(t, target.Config{}, target.Subsystem{})
	h := ioConnected(t, addr, true, true)
	b := (&pdu.CapsuleCmd{Cmd: writeCmd(1, 0, 8, pdu.SGLInCapsule, 4096), Data: make([]byte, 4096)}).AppendPDU(nil, h.o)
	b[len(b)-1] ^= 0xFF
	h.sendRaw(b)
	if cpl := h.resp(); cpl.CID != 1 || cpl.SCT() != 0 || cpl.SC() != nvme.SCTransientTranspt {
		t.Fatalf("in-capsule data digest error: %+v", cpl)
	}
	h.send(&pdu.CapsuleCmd{Cmd: writeCmd(2, 0, 16, pdu.SGLTransport, 8192)})
	f, _ := h.next()
	if f.Type != pdu.TypeR2T {
		t.Fatalf("expected R2T, got %v", f.Type)
	}
	b = (&pdu.H2CData{CCCID: 2, TTAG: f.R2T().TTAG, Last: true, Data: make([]byte, 8192)}).AppendPDU(nil, h.o)
	b[len(b)-2] ^= 0xFF
	h.sendRaw(b)
	if cpl := h.resp(); cpl.CID != 2 || cpl.SC() != nvme.SCTransientTranspt {
		t.Fatalf("H2CData data digest error: %+v", cpl)
	}
	h.send(&pdu.CapsuleCmd{Cmd: writeCmd(3, 0, 8, pdu.SGLInCapsule, 4096), Data: make([]byte, 4096)})
	if cpl := h.resp(); cpl.CID != 3 || !cpl.OK() {
		t.Fatalf("connection unusable after digest errors: %+v", cpl)
	}
}

func TestUnknownOpcodeAndInCapsule(t *testing.T) {
	_, addr := newTarget(t, target.Config{}, target.Subsystem{})
	a, _ := adminConnected(t, addr, false, false)
	a.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: 0xC1, Flags: 0x40, CID: 9}})
	if cpl := a.resp(); cpl.CID != 9 || cpl.SCT() != 0 || cpl.SC() != nvme.SCInvalidOpcode {
		t.Fatalf("admin unknown opcode: %+v", cpl)
	}
	h := ioConnected(t, addr, true, true)
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: 0x7E, Flags: 0x40, CID: 4, NSID: 1}})
	if cpl := h.resp(); cpl.CID != 4 || cpl.SC() != nvme.SCInvalidOpcode {
		t.Fatalf("io unknown opcode: %+v", cpl)
	}
	// 4 KiB in-capsule: answered by a CapsuleResp directly, no R2T.
	h.send(&pdu.CapsuleCmd{Cmd: writeCmd(5, 0, 8, pdu.SGLInCapsule, 4096), Data: bytes.Repeat([]byte{1}, 4096)})
	if f, _ := h.next(); f.Type != pdu.TypeCapsuleResp || f.Completion().CID != 5 || !f.Completion().OK() {
		t.Fatalf("in-capsule write answered by %v", f.Type)
	}
	// 8 KiB in-capsule exceeds the I/O queue's 4 KiB: SGL length invalid.
	h.send(&pdu.CapsuleCmd{Cmd: writeCmd(6, 0, 16, pdu.SGLInCapsule, 8192), Data: make([]byte, 8192)})
	if cpl := h.resp(); cpl.SC() != nvme.SCSGLLengthInvalid {
		t.Fatalf("oversized in-capsule: %+v", cpl)
	}
	// LBA out of range.
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.CmdRead, Flags: 0x40, CID: 8, NSID: 1, CDW10: 2048, SGL: pdu.SGL{Len: 512, Type: pdu.SGLTransport}}})
	if cpl := h.resp(); cpl.SC() != nvme.SCLBAOutOfRange {
		t.Fatalf("read past end: %+v", cpl)
	}
	// 8 KiB via R2T: R2T for the whole length, then CapsuleResp.
	h.send(&pdu.CapsuleCmd{Cmd: writeCmd(10, 8, 16, pdu.SGLTransport, 8192)})
	f, _ := h.next()
	if f.Type != pdu.TypeR2T || f.R2T().R2TL != 8192 || f.R2T().CCCID != 10 {
		t.Fatalf("expected R2T for 8192 bytes, got %v", f.Type)
	}
	r := f.R2T()
	h.send(&pdu.H2CData{CCCID: 10, TTAG: r.TTAG, DATAO: 0, Data: make([]byte, 4096)})
	h.send(&pdu.H2CData{CCCID: 10, TTAG: r.TTAG, DATAO: 4096, Last: true, Data: make([]byte, 4096)})
	if cpl := h.resp(); cpl.CID != 10 || !cpl.OK() {
		t.Fatalf("R2T write: %+v", cpl)
	}
	// Read: C2HData then a CapsuleResp (host kept SQ flow control on).
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.CmdRead, Flags: 0x40, CID: 11, NSID: 1, CDW12: 7, SGL: pdu.SGL{Len: 4096, Type: pdu.SGLTransport}}})
	f, data := h.next()
	if f.Type != pdu.TypeC2HData || f.Flags != pdu.FlagHDGST|pdu.FlagDDGST|pdu.FlagLast || !bytes.Equal(data, bytes.Repeat([]byte{1}, 4096)) {
		t.Fatalf("read reply %+v", f.Header)
	}
	if cpl := h.resp(); cpl.CID != 11 || !cpl.OK() {
		t.Fatalf("read completion %+v", cpl)
	}
}

func TestShutdownProperty(t *testing.T) {
	_, addr := newTarget(t, target.Config{}, target.Subsystem{})
	h, _ := adminConnected(t, addr, true, false)
	prop := func(set bool, ofst, v uint32, size8 bool) pdu.Completion {
		fct := nvme.FabricsPropGet
		if set {
			fct = nvme.FabricsPropSet
		}
		var attr uint32
		if size8 {
			attr = 1
		}
		h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 20, NSID: uint32(fct), CDW10: attr, CDW11: ofst, CDW12: v}})
		return h.resp()
	}
	if c := prop(false, nvme.PropCAP, 0, true); uint64(c.DW0)|uint64(c.DW1)<<32 != 0x080000201E01007F {
		t.Fatalf("CAP %x %x", c.DW1, c.DW0)
	}
	if c := prop(false, nvme.PropCSTS, 0, false); c.DW0 != 1 {
		t.Fatalf("CSTS after enable 0x%x", c.DW0)
	}
	prop(true, nvme.PropCC, 0x00464001, false)
	if c := prop(false, nvme.PropCSTS, 0, false); c.DW0 != 0x9 {
		t.Fatalf("CSTS after shutdown 0x%x, want 0x9", c.DW0)
	}
	if c := prop(false, 0x40, 0, false); c.SCT() != 1 || c.SC() != nvme.SCConnectInvalidParam {
		t.Fatalf("unknown property: %+v", c)
	}
}

// TestDisconnectMidR2T: a host that vanishes while the target waits for
// H2CData leaves no goroutine or controller behind and others keep working.
func TestDisconnectMidR2T(t *testing.T) {
	tg, addr := newTarget(t, target.Config{}, target.Subsystem{})
	stop := healthyHost(t, addr)
	before := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		h := ioConnected(t, addr, false, false)
		h.send(&pdu.CapsuleCmd{Cmd: writeCmd(1, 0, 256, pdu.SGLTransport, 128<<10)})
		f, _ := h.next()
		if f.Type != pdu.TypeR2T || f.R2T().R2TL != 128<<10 {
			t.Fatalf("expected R2T of 128 KiB, got %v", f.Type)
		}
		h.send(&pdu.H2CData{CCCID: 1, TTAG: f.R2T().TTAG, Data: make([]byte, 64<<10)}) // half, not last
		h.nc.Close()
	}
	waitFor(t, func() bool {
		for _, h := range tg.Stats().Hosts {
			if h.HostNQN == hostNQN && h.IOQueues != 0 {
				return false
			}
		}
		return true
	}, "the dropped I/O queues to be removed")
	time.Sleep(50 * time.Millisecond)
	if n := stop(); n == 0 {
		t.Fatal("healthy host made no progress")
	}
	// The raw hosts' five admin queues are still open (one target goroutine
	// each); the per-command goroutines that waited for data and the I/O
	// queue readers must be gone.
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before+5+3 }, "R2T waiters to exit")
}
