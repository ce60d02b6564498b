package target_test

import (
	"encoding/binary"
	"fmt"
	"github.com/kvtier/kvtier/internal/shared"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/internal/pcapio"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

var vectors = shared.Path("nvme-tcp-vectors")

// labTarget is configured like the SPDK v26.05 lab target that produced the
// captures: subsystem nqn.2026-11.io.kvtier:test, serial KVTIER0000000001,
// model "kvtier lab malloc", one 64 MiB namespace of 512-byte blocks
// (zeroes), 128-entry queues, 4 KiB in-capsule data, MAXH2CDATA 128 KiB,
// 10 s keep-alive granularity, and SUCCESS folded into C2HData as SPDK's
// c2h_success does.
func labTarget(t *testing.T) string {
	mem, err := namespace.NewMemory(make([]byte, 64<<20), 512)
	if err != nil {
		t.Fatal(err)
	}
	_, addr := newTarget(t, target.Config{KeepAliveGranularity: 10 * time.Second, C2HSuccess: true},
		target.Subsystem{NQN: "nqn.2026-11.io.kvtier:test", Serial: "KVTIER0000000001", Model: "kvtier lab malloc",
			Namespaces: []namespace.Namespace{mem}})
	return addr
}

// expectedPDU is one SPDK reply and the command it answered (CIDs are
// reused, so the command is captured when the reply is seen).
type expectedPDU struct {
	raw []byte
	ci  cmdInfo
}

type cmdInfo struct {
	opcode, fctype, cns, lid, fid uint8
	ofst                          uint32
}

// replayConn is our side of one captured TCP connection.
type replayConn struct {
	nc       net.Conn
	expected []expectedPDU
	mu       sync.Mutex // guards got
	got      [][]byte
	cmds     map[uint16]cmdInfo
	done     chan struct{}
	usedR2T  map[int]bool // indexes into got of R2Ts already answered
}

func (rc *replayConn) read(t *testing.T) {
	defer close(rc.done)
	for {
		var h [8]byte
		if _, err := io.ReadFull(rc.nc, h[:]); err != nil {
			return
		}
		plen := binary.LittleEndian.Uint32(h[4:])
		if plen < 8 || plen > 1<<20 {
			t.Errorf("our target sent plen %d", plen)
			return
		}
		b := make([]byte, plen)
		copy(b, h[:])
		if _, err := io.ReadFull(rc.nc, b[8:]); err != nil {
			t.Errorf("short PDU from our target: %v", err)
			return
		}
		rc.mu.Lock()
		rc.got = append(rc.got, b)
		rc.mu.Unlock()
	}
}

// waitCount waits (up to 5 s) until our target sent at least n PDUs.
func (rc *replayConn) waitCount(n int) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		rc.mu.Lock()
		got := len(rc.got)
		rc.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// findIndex polls rc.got until match accepts a PDU or the deadline passes.
func (rc *replayConn) findIndex(t *testing.T, match func(int, []byte) bool) int {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		rc.mu.Lock()
		for i, b := range rc.got {
			if match(i, b) {
				rc.mu.Unlock()
				return i
			}
		}
		rc.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("our target never sent the PDU the next host PDU depends on")
	return -1
}

func (rc *replayConn) find(t *testing.T, match func([]byte) bool) []byte {
	i := rc.findIndex(t, func(_ int, b []byte) bool { return match(b) })
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.got[i]
}

// TestReplayHostSide feeds the host side of every SPDK capture to our
// target and compares our replies with SPDK's, PDU by PDU.
func TestReplayHostSide(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(vectors, "pcap", "*.pcap"))
	if len(files) == 0 {
		t.Skipf("no captures under %s", vectors)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) { replay(t, f) })
	}
}

func replay(t *testing.T, path string) {
	pdus, err := pcapio.NVMeTCPPDUs(path)
	if err != nil {
		t.Fatal(err)
	}
	addr := labTarget(t)
	conns := map[int]*replayConn{}
	var cntlid uint16
	for _, p := range pdus {
		rc := conns[p.Conn]
		if rc == nil {
			nc := dialTCP(t, addr)
			rc = &replayConn{nc: nc, cmds: map[uint16]cmdInfo{}, done: make(chan struct{}), usedR2T: map[int]bool{}}
			conns[p.Conn] = rc
			go rc.read(t)
		}
		if p.Dir == 1 {
			rc.expected = append(rc.expected, expectedPDU{p.Raw, rc.cmds[replyCID(p.Raw)]})
			continue
		}
		// Causality across connections: what the host sends now may depend
		// on replies already seen on its other connections (I/O Connect
		// after CC.EN): wait until our target has sent as many.
		for k, other := range conns {
			if k != p.Conn {
				other.waitCount(len(other.expected))
			}
		}
		out := p.Raw
		m, err := pdu.Decode(p.Raw)
		if err != nil {
			t.Fatal(err)
		}
		switch v := m.(type) {
		case *pdu.CapsuleCmd:
			c := v.Cmd
			rc.cmds[c.CID] = cmdInfo{opcode: c.Opcode, fctype: c.FabricsType(), cns: uint8(c.CDW10), lid: uint8(c.CDW10), fid: uint8(c.CDW10), ofst: c.CDW11}
			if c.Opcode == nvme.OpcodeFabrics && c.FabricsType() == nvme.FabricsConnect {
				if qid := c.CDW10 >> 16; qid != 0 {
					// I/O Connect names the admin controller: use ours.
					d := append([]byte(nil), v.Data...)
					binary.LittleEndian.PutUint16(d[16:], cntlid)
					out = (&pdu.CapsuleCmd{Cmd: c, Data: d}).AppendPDU(nil, pdu.OptionsOf(p.Raw))
				}
			}
		case *pdu.H2CData:
			// CIDs are reused: take the first R2T for this command not yet
			// answered (H2CData for one R2T may span several PDUs; the last
			// one marks it answered).
			idx := rc.findIndex(t, func(i int, b []byte) bool {
				return !rc.usedR2T[i] && b[0] == byte(pdu.TypeR2T) && binary.LittleEndian.Uint16(b[8:]) == v.CCCID
			})
			rc.mu.Lock()
			r2t := rc.got[idx]
			rc.mu.Unlock()
			if v.Last {
				rc.usedR2T[idx] = true
			}
			v2 := *v
			v2.TTAG = binary.LittleEndian.Uint16(r2t[10:])
			out = v2.AppendPDU(nil, pdu.OptionsOf(p.Raw))
		}
		if _, err := rc.nc.Write(out); err != nil {
			t.Fatalf("frame %d: write: %v", p.Frame, err)
		}
		if m, ok := m.(*pdu.CapsuleCmd); ok && m.Cmd.Opcode == nvme.OpcodeFabrics && m.Cmd.FabricsType() == nvme.FabricsConnect && m.Cmd.CDW10>>16 == 0 {
			cid := m.Cmd.CID
			resp := rc.find(t, func(b []byte) bool {
				return b[0] == byte(pdu.TypeCapsuleResp) && binary.LittleEndian.Uint16(b[20:]) == cid
			})
			cntlid = binary.LittleEndian.Uint16(resp[8:])
		}
	}
	// Wait for every expected reply, then close and compare.
	for _, rc := range conns {
		rc.waitCount(len(rc.expected))
		time.Sleep(20 * time.Millisecond) // anything extra would show up now
		rc.nc.Close()
		<-rc.done
	}
	compared, masked := 0, 0
	for k, rc := range conns {
		if len(rc.got) != len(rc.expected) {
			t.Errorf("connection %d: our target sent %d PDUs, SPDK %d", k, len(rc.got), len(rc.expected))
		}
		// Replies to different commands may be reordered by concurrency:
		// pair them by (type, command id) keeping per-command order.
		used := make([]bool, len(rc.got))
		for _, ex := range rc.expected {
			exp := ex.raw
			j := -1
			for i, g := range rc.got {
				if !used[i] && pduKey(g) == pduKey(exp) {
					j = i
					break
				}
			}
			if j < 0 {
				t.Errorf("connection %d: no reply of ours matches SPDK's %v", k, describe(exp))
				continue
			}
			used[j] = true
			diffs, m := comparePDU(exp, rc.got[j], ex.ci)
			compared++
			if m {
				masked++
			}
			for _, d := range diffs {
				t.Errorf("connection %d %v: %s", k, describe(exp), d)
			}
		}
	}
	t.Logf("%d controller PDUs compared (%d with documented masks)", compared, masked)
	if compared == 0 {
		t.Fatal("nothing compared")
	}
}

// replyCID is the command a controller PDU belongs to.
func replyCID(b []byte) uint16 {
	switch pdu.Type(b[0]) {
	case pdu.TypeCapsuleResp:
		return binary.LittleEndian.Uint16(b[20:])
	case pdu.TypeC2HData, pdu.TypeR2T:
		return binary.LittleEndian.Uint16(b[8:])
	}
	return 0xFFFF
}

func pduKey(b []byte) string {
	t := pdu.Type(b[0])
	switch t {
	case pdu.TypeCapsuleResp:
		return fmt.Sprintf("%v/%d", t, binary.LittleEndian.Uint16(b[20:]))
	case pdu.TypeC2HData, pdu.TypeR2T:
		return fmt.Sprintf("%v/%d", t, binary.LittleEndian.Uint16(b[8:]))
	}
	return t.String()
}

func describe(b []byte) string {
	h := pdu.ParseHeader(b)
	return fmt.Sprintf("%s (flags 0x%02x plen %d)", pduKey(b), h.Flags, h.PLEN)
}
