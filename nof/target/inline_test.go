package target_test

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

// TestInlineAnswersBatched: commands of a memory namespace that arrive in
// one write are served by the reader goroutine and answered together: 32
// reads and 32 in-capsule writes sent at once get their answers in a few
// write system calls (Stats.Transport), with the right data, and a read
// after a write in a later batch sees it. With header and data digests.
func TestInlineAnswersBatched(t *testing.T) {
	backing := make([]byte, 1<<20)
	for i := range backing {
		backing[i] = byte(i * 7)
	}
	mem, _ := namespace.NewMemory(backing, 512)
	want := bytes.Clone(backing)
	tg, addr := newTarget(t, target.Config{}, target.Subsystem{Namespaces: []namespace.Namespace{mem}})
	h := ioConnected(t, addr, true, true)

	before := tg.Stats().Transport
	var out []byte
	for i := 0; i < 32; i++ {
		cmd := pdu.Command{Opcode: nvme.CmdRead, Flags: 0x40, CID: uint16(i), NSID: 1, CDW10: uint32(i * 8), CDW12: 7,
			SGL: pdu.SGL{Len: 4096, Type: pdu.SGLTransport}}
		out = (&pdu.CapsuleCmd{Cmd: cmd}).AppendPDU(out, h.o)
	}
	h.sendRaw(out)
	got := map[uint16][]byte{}
	for done := 0; done < 32; {
		f, d := h.next()
		switch f.Type {
		case pdu.TypeC2HData:
			cccid, _, _, _ := f.DataHeader()
			got[cccid] = d
		case pdu.TypeCapsuleResp:
			if c := f.Completion(); !c.OK() {
				t.Fatalf("read %d: status %#x", c.CID, c.Status)
			}
			done++
		}
	}
	for i := 0; i < 32; i++ {
		if !bytes.Equal(got[uint16(i)], want[i*4096:(i+1)*4096]) {
			t.Fatalf("read %d returned the wrong data", i)
		}
	}
	mid := tg.Stats().Transport
	if w := mid.WriteCalls - before.WriteCalls; w > 8 {
		t.Fatalf("32 reads sent together were answered in %d writes, want a few", w)
	}

	out = out[:0]
	for i := 0; i < 32; i++ {
		data := bytes.Repeat([]byte{byte(i + 1)}, 4096)
		copy(want[(100+i)*4096:], data)
		cmd := pdu.Command{Opcode: nvme.CmdWrite, Flags: 0x40, CID: uint16(i), NSID: 1, CDW10: uint32((100 + i) * 8), CDW12: 7,
			SGL: pdu.SGL{Len: 4096, Type: pdu.SGLInCapsule}}
		out = (&pdu.CapsuleCmd{Cmd: cmd, Data: data}).AppendPDU(out, h.o)
	}
	h.sendRaw(out)
	for i := 0; i < 32; i++ {
		if c := h.resp(); !c.OK() {
			t.Fatalf("write %d: status %#x", c.CID, c.Status)
		}
	}
	if w := tg.Stats().Transport.WriteCalls - mid.WriteCalls; w > 8 {
		t.Fatalf("32 writes sent together were answered in %d writes, want a few", w)
	}
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.CmdRead, Flags: 0x40, CID: 40, NSID: 1, CDW10: 100 * 8, CDW12: 32*8 - 1,
		SGL: pdu.SGL{Len: 32 * 4096, Type: pdu.SGLTransport}}})
	var data []byte
	for {
		f, d := h.next()
		if f.Type == pdu.TypeC2HData {
			data = append(data, d...)
			continue
		}
		if c := f.Completion(); f.Type != pdu.TypeCapsuleResp || !c.OK() {
			t.Fatalf("read back: %v %#x", f.Type, c.Status)
		}
		break
	}
	if !bytes.Equal(data, want[100*4096:132*4096]) || !bytes.Equal(backing, want) {
		t.Fatal("written data not read back")
	}
}

// smallBufListener accepts TCP connections with 16 KiB socket buffers, so
// that a few answers fill them.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetReadBuffer(16 << 10)
		tc.SetWriteBuffer(16 << 10)
	}
	return nc, err
}

// TestBlockingHostNoDeadlock: a single-threaded host that writes a long
// burst (60 reads of 128 KiB interleaved with 60 in-capsule writes, 250
// KiB, within its SQ size) in one blocking write, and only then reads, must
// get every answer even with small socket buffers on both sides: the
// target's reader keeps reading while its answers (7.5 MiB) wait for the host
// (pdu.Writer.Push). A reader that wrote them itself would block on the
// host, which is blocked writing to it. (With the buffers Linux gives
// loopback sockets by default, a host within its SQ size cannot fill them.)
func TestBlockingHostNoDeadlock(t *testing.T) {
	tg, _ := newTarget(t, target.Config{}, target.Subsystem{})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go tg.Serve(context.Background(), smallBufListener{raw})
	addr := raw.Addr().String()
	_, cntlid := adminConnected(t, addr, false, false)
	h := dialRaw(t, addr, false, false)
	cd := nvme.ConnectData{CNTLID: cntlid, SubNQN: subNQN, HostNQN: hostNQN}
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 100, NSID: uint32(nvme.FabricsConnect),
		SGL: pdu.SGL{Len: 1024, Type: pdu.SGLInCapsule}, CDW10: 1 << 16, CDW11: 127}, Data: cd.Marshal()}) // 128 entries
	if c := h.resp(); !c.OK() {
		t.Fatalf("io connect: %#x", c.Status)
	}
	tc := h.nc.(*net.TCPConn)
	tc.SetReadBuffer(16 << 10)
	tc.SetWriteBuffer(16 << 10)
	var out []byte
	const pairs = 60 // 120 commands outstanding: within the SQ (128 entries)
	for i := 0; i < pairs; i++ {
		out = (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.CmdRead, Flags: 0x40, CID: uint16(2 * i), NSID: 1, CDW10: 0, CDW12: 255,
			SGL: pdu.SGL{Len: 128 << 10, Type: pdu.SGLTransport}}}).AppendPDU(out, h.o)
		out = (&pdu.CapsuleCmd{Cmd: writeCmd(uint16(2*i+1), uint64(256+8*i), 8, pdu.SGLInCapsule, 4096), Data: bytes.Repeat([]byte{byte(i)}, 4096)}).AppendPDU(out, h.o)
	}
	h.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := h.nc.Write(out); err != nil {
		t.Fatalf("host's burst: %v (the target stopped reading while its answers waited)", err)
	}
	for done := 0; done < 2*pairs; done++ {
		if c := h.resp(); !c.OK() {
			t.Fatalf("command %d: status %#x", c.CID, c.Status)
		}
	}
}
