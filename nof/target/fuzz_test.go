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
