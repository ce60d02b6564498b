package target_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

// FuzzTargetConnection feeds arbitrary bytes after a valid ICReq and admin
// Connect to a real target over TCP. The target must never crash (a panic
// in any of its goroutines fails the fuzzer) and must keep serving new
// connections.
func FuzzTargetConnection(f *testing.F) {
	o := pdu.Options{}
	cd := nvme.ConnectData{CNTLID: 0xFFFF, SubNQN: subNQN, HostNQN: hostNQN}
	prefix := (&pdu.ICReq{}).AppendPDU(nil, o)
	prefix = (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, NSID: uint32(nvme.FabricsConnect),
		SGL: pdu.SGL{Len: 1024, Type: pdu.SGLInCapsule}, CDW11: 31}, Data: cd.Marshal()}).AppendPDU(prefix, o)
	f.Add((&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, NSID: uint32(nvme.FabricsPropSet), CDW11: nvme.PropCC, CDW12: 0x00460001}}).AppendPDU(nil, o))
	f.Add(identifyCmd(1, 0).AppendPDU(nil, o))
	f.Add((&pdu.H2CData{TTAG: 1, Data: []byte("abcd"), Last: true}).AppendPDU(nil, o))
	f.Add((&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.AdminGetLogPage, CDW10: 0xFFFF0002, SGL: pdu.SGL{Len: 4096, Type: pdu.SGLTransport}}}).AppendPDU(nil, o))
	f.Add([]byte{4, 0, 72, 0, 0xFF, 0xFF, 0xFF, 0x7F})
	_, addr := newTarget(f, target.Config{}, target.Subsystem{})
	f.Fuzz(func(t *testing.T, b []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(time.Second))
		nc.Write(append(append([]byte(nil), prefix...), b...))
		nc.(*net.TCPConn).CloseWrite() // EOF after the input: the target tears down
		io.Copy(io.Discard, nc)        // until the target closes or the deadline
	})
}

// FuzzTargetIOQueue feeds arbitrary bytes after a valid ICReq and I/O
// queue Connect (to a controller enabled beforehand) to a real target, so
// the NVM command paths run on fuzzed input: inline commands of the memory
// namespace (NSID 1), worker commands of the file namespace (NSID 2), R2T
// and H2CData. The target must never crash and must keep serving.
func FuzzTargetIOQueue(f *testing.F) {
	o := pdu.Options{}
	read := func(nsid uint32, blocks uint32, sglLen uint32) []byte {
		return (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.CmdRead, Flags: 0x40, CID: 3, NSID: nsid, CDW12: blocks - 1,
			SGL: pdu.SGL{Len: sglLen, Type: pdu.SGLTransport}}}).AppendPDU(nil, o)
	}
	f.Add(read(1, 8, 4096))
	f.Add(read(2, 1, 4096))
	f.Add(read(1, 256, 128<<10))
	f.Add(append(read(1, 8, 4096), read(1, 8, 512)...))
	f.Add((&pdu.CapsuleCmd{Cmd: writeCmd(4, 0, 8, pdu.SGLInCapsule, 4096), Data: make([]byte, 4096)}).AppendPDU(nil, o))
	w := (&pdu.CapsuleCmd{Cmd: writeCmd(5, 8, 16, pdu.SGLTransport, 8192)}).AppendPDU(nil, o)
	f.Add((&pdu.H2CData{CCCID: 5, TTAG: 0, Data: make([]byte, 8192), Last: true}).AppendPDU(w, o))
	f.Add((&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.CmdWriteZeroes, CID: 6, NSID: 1, CDW12: 0xFFFF}}).AppendPDU(nil, o))
	_, addr := newTarget(f, target.Config{}, target.Subsystem{})
	adm := dialRaw(f, addr, false, false)
	cpl := adm.connect(0, 0xFFFF, subNQN, hostNQN, 0)
	if !cpl.OK() {
		f.Fatalf("admin connect: %#x", cpl.Status)
	}
	adm.enable()
	cd := nvme.ConnectData{CNTLID: uint16(cpl.DW0), SubNQN: subNQN, HostNQN: hostNQN}
	prefix := (&pdu.ICReq{}).AppendPDU(nil, o)
	prefix = (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, NSID: uint32(nvme.FabricsConnect),
		SGL: pdu.SGL{Len: 1024, Type: pdu.SGLInCapsule}, CDW10: 1 << 16, CDW11: 127}, Data: cd.Marshal()}).AppendPDU(prefix, o)
	f.Fuzz(func(t *testing.T, b []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(time.Second))
		nc.Write(append(append([]byte(nil), prefix...), b...))
		nc.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, nc)
	})
}
