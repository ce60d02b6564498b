package target_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

// newSecret draws a key and returns it in the DHHC-1 form, parsed.
func newSecret(t testing.TB, n int, hh int) *auth.Secret {
	t.Helper()
	key := make([]byte, n)
	rand.Read(key)
	raw := binary.LittleEndian.AppendUint32(key, crc32.ChecksumIEEE(key))
	s, err := auth.ParseSecret(fmt.Sprintf("DHHC-1:%02d:%s:", hh, base64.StdEncoding.EncodeToString(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func authTarget(t *testing.T) (*target.Target, string, *auth.Secret, *auth.Secret) {
	hs, cs := newSecret(t, 32, 1), newSecret(t, 48, 0)
	tg, addr := newTarget(t, target.Config{}, target.Subsystem{
		HostSecrets: map[string]*auth.Secret{hostNQN: hs},
		CtrlSecrets: map[string]*auth.Secret{hostNQN: cs},
	})
	return tg, addr, hs, cs
}

func TestAuthConnectAndIO(t *testing.T) {
	tg, addr, hs, cs := authTarget(t)
	want := uint64(0)
	for _, g := range []uint8{auth.DHNull, auth.DHFFDHE2048} {
		for _, bidi := range []bool{false, true} {
			t.Run(fmt.Sprintf("group%d-bidi%v", g, bidi), func(t *testing.T) {
				cfg := initiator.Config{DHCHAPSecret: hs, DHGroups: []uint8{g}, IOQueues: 2}
				if bidi {
					cfg.DHCHAPCtrlSecret = cs
				}
				c := dial(t, addr, cfg)
				want += 3 // admin queue and two I/O queues
				buf := bytes.Repeat([]byte{byte(g + 1)}, 8192)
				ctx := context.Background()
				if err := c.WriteAt(ctx, 1, buf, 4096); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(buf))
				if err := c.ReadAt(ctx, 1, got, 4096); err != nil || !bytes.Equal(got, buf) {
					t.Fatalf("read back: %v", err)
				}
				if st := tg.Stats().Auth; st.Succeeded != want || st.Failed != 0 {
					t.Fatalf("auth stats %+v, want %d succeeded", st, want)
				}
			})
		}
	}
}

func TestAuthRefusals(t *testing.T) {
	tg, addr, hs, cs := authTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wrong := newSecret(t, 32, 1)

	// Wrong host secret: the controller answers Failure1.
	_, err := initiator.Dial(ctx, addr, initiator.Config{SubNQN: subNQN, HostNQN: hostNQN, DHCHAPSecret: wrong})
	var fe *auth.FailureError
	if !kverr.Is(err, kverr.Unauthorized) || !errors.As(err, &fe) || fe.Explanation != auth.ExplFailed {
		t.Fatalf("wrong secret: %v", err)
	}
	if st := tg.Stats().Auth; st.Failed != 1 || st.Succeeded != 0 {
		t.Fatalf("after a wrong secret: %+v", st)
	}
	// Same secret, another host NQN that has none: refused at Connect.
	_, err = initiator.Dial(ctx, addr, initiator.Config{SubNQN: subNQN, HostNQN: hostNQN + "-b", DHCHAPSecret: hs})
	var se *nvme.StatusError
	if !errors.As(err, &se) || se.SC != nvme.SCConnectInvalidHost || !kverr.Is(err, kverr.Unauthorized) {
		t.Fatalf("host without a secret: %v", err)
	}
	// Wrong controller secret (bidirectional): we refuse the controller.
	_, err = initiator.Dial(ctx, addr, initiator.Config{SubNQN: subNQN, HostNQN: hostNQN, DHCHAPSecret: hs, DHCHAPCtrlSecret: wrong})
	if !kverr.Is(err, kverr.Unauthorized) || !errors.As(err, &fe) {
		t.Fatalf("wrong controller secret: %v", err)
	}
	// Our initiator without a secret stops at the ATR bit.
	_, err = initiator.Dial(ctx, addr, initiator.Config{SubNQN: subNQN, HostNQN: hostNQN})
	if !kverr.Is(err, kverr.Unauthorized) {
		t.Fatalf("no secret: %v", err)
	}
	_ = cs

	// A host that ignores ATR: Connect succeeds with ATR set, then every
	// other command is refused as Authentication Required, nothing served.
	h := dialRaw(t, addr, false, false)
	cpl := h.connect(0, 0xFFFF, subNQN, hostNQN, 0)
	if !cpl.OK() || cpl.DW0&nvme.ConnectATR == 0 {
		t.Fatalf("connect: %+v (want success with ATR)", cpl)
	}
	before := tg.Stats().Auth.Refused
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 101, NSID: uint32(nvme.FabricsPropSet), CDW11: nvme.PropCC, CDW12: 0x00460001}})
	if c := h.resp(); c.SCT() != nvme.SCTSpecific || c.SC() != nvme.SCAuthRequired {
		t.Fatalf("property set before authentication: %+v", c)
	}
	h.send(identifyCmd(1, 0))
	if c := h.resp(); c.SCT() != nvme.SCTSpecific || c.SC() != nvme.SCAuthRequired {
		t.Fatalf("identify before authentication: %+v", c)
	}
	// A forged Reply (no Negotiate) earns a Failure1, not access.
	rep := (&auth.Message{ID: auth.Reply, R: make([]byte, 32)}).Marshal()
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 102, NSID: uint32(nvme.FabricsAuthSend),
		SGL: pdu.SGL{Len: uint32(len(rep)), Type: pdu.SGLInCapsule}, CDW10: 0xE9010100, CDW11: uint32(len(rep))}, Data: rep})
	if c := h.resp(); !c.OK() {
		t.Fatalf("auth send: %+v", c)
	}
	h.send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 103, NSID: uint32(nvme.FabricsAuthRecv),
		SGL: pdu.SGL{Len: 512, Type: pdu.SGLTransport}, CDW10: 0xE9010100, CDW11: 512}})
	f, d := h.next()
	if f.Type != pdu.TypeC2HData {
		t.Fatalf("auth receive: PDU type %v", f.Type)
	}
	if m, err := auth.Parse(d); err != nil || m.ID != auth.Failure1 {
		t.Fatalf("auth receive after a forged reply: %+v %v", m, err)
	}
	h.send(identifyCmd(1, 0))
	for {
		f, _ := h.next()
		if f.Type == pdu.TypeCapsuleResp {
			if c := f.Completion(); c.CID == 7 {
				if c.SC() != nvme.SCAuthRequired {
					t.Fatalf("identify after a failed transaction: %+v", c)
				}
				break
			}
		}
	}
	st := tg.Stats().Auth
	if st.Refused < before+3 || st.Succeeded != 0 || st.Failed < 3 {
		t.Fatalf("auth stats %+v (refused before %d)", st, before)
	}
}

func TestAuthConfigErrors(t *testing.T) {
	tg, err := target.New(target.Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	mem := memNS(t)
	s := newSecret(t, 32, 0)
	for name, sub := range map[string]target.Subsystem{
		"bad host nqn":         {HostSecrets: map[string]*auth.Secret{"bogus": s}},
		"nil secret":           {HostSecrets: map[string]*auth.Secret{hostNQN: nil}},
		"ctrl without host":    {HostSecrets: map[string]*auth.Secret{hostNQN: s}, CtrlSecrets: map[string]*auth.Secret{hostNQN + "x": s}},
		"ctrl and no host map": {CtrlSecrets: map[string]*auth.Secret{hostNQN: s}},
	} {
		sub.NQN, sub.Namespaces = subNQN, mem
		if err := tg.AddSubsystem(sub); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func memNS(t *testing.T) []namespace.Namespace {
	mem, err := namespace.NewMemory(make([]byte, 1<<20), 512)
	if err != nil {
		t.Fatal(err)
	}
	return []namespace.Namespace{mem}
}

// A host that connects and then sits on an unauthenticated queue is cut
// off after HeaderTimeout, keep-alive or not (it asked for none here).
func TestAuthUnauthenticatedQueueTimesOut(t *testing.T) {
	hs := newSecret(t, 32, 0)
	_, addr := newTarget(t, target.Config{HeaderTimeout: 300 * time.Millisecond},
		target.Subsystem{HostSecrets: map[string]*auth.Secret{hostNQN: hs}})
	h := dialRaw(t, addr, false, false)
	if cpl := h.connect(0, 0xFFFF, subNQN, hostNQN, 0); !cpl.OK() || cpl.DW0&nvme.ConnectATR == 0 {
		t.Fatalf("connect: %+v", cpl)
	}
	start := time.Now()
	if _, err := h.r.Next(); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("unauthenticated queue still open after %v: %v", time.Since(start), err)
	}
}

// FuzzTargetAuth feeds arbitrary bytes after ICReq and an admin Connect to
// a subsystem that requires authentication: the target must not crash and
// no input may authenticate the queue (the host secret is never given).
func FuzzTargetAuth(f *testing.F) {
	o := pdu.Options{}
	cd := nvme.ConnectData{CNTLID: 0xFFFF, SubNQN: subNQN, HostNQN: hostNQN}
	prefix := (&pdu.ICReq{}).AppendPDU(nil, o)
	prefix = (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, NSID: uint32(nvme.FabricsConnect),
		SGL: pdu.SGL{Len: 1024, Type: pdu.SGLInCapsule}, CDW11: 31}, Data: cd.Marshal()}).AppendPDU(prefix, o)
	send := func(m []byte) []byte {
		return (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 1, NSID: uint32(nvme.FabricsAuthSend),
			SGL: pdu.SGL{Len: uint32(len(m)), Type: pdu.SGLInCapsule}, CDW10: 0xE9010100, CDW11: uint32(len(m))}, Data: m}).AppendPDU(nil, o)
	}
	recv := (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 2, NSID: uint32(nvme.FabricsAuthRecv),
		SGL: pdu.SGL{Len: 1024, Type: pdu.SGLTransport}, CDW10: 0xE9010100, CDW11: 1024}}).AppendPDU(nil, o)
	neg := send((&auth.Message{ID: auth.Negotiate, Hashes: []uint8{1}, Groups: []uint8{0, 1}}).Marshal())
	f.Add(append(append([]byte(nil), neg...), recv...))
	f.Add(append(append(append([]byte(nil), neg...), recv...), send((&auth.Message{ID: auth.Reply, R: make([]byte, 32)}).Marshal())...))
	f.Add(append(send((&auth.Message{ID: auth.Success2}).Marshal()), identifyCmd(1, 0).AppendPDU(nil, o)...))
	f.Add(recv)
	tg, addr := newTarget(f, target.Config{HeaderTimeout: time.Second},
		target.Subsystem{HostSecrets: map[string]*auth.Secret{hostNQN: newSecret(f, 32, 1)}})
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
		if st := tg.Stats().Auth; st.Succeeded != 0 {
			t.Fatalf("a queue authenticated without the secret: %+v", st)
		}
	})
}

// BenchmarkConnectAuth is the cost of authentication, paid once per queue
// at connect (I/O afterwards is unchanged): a whole Dial (admin queue and
// one I/O queue) and Close, open beside NULL-group and ffdhe2048
// authentication (bidirectional) in the same run.
func BenchmarkConnectAuth(b *testing.B) {
	hs, cs := newSecret(b, 32, 1), newSecret(b, 32, 1)
	_, open := newTarget(b, target.Config{}, target.Subsystem{NQN: subNQN + "-open"})
	_, authed := newTarget(b, target.Config{}, target.Subsystem{HostSecrets: map[string]*auth.Secret{hostNQN: hs},
		CtrlSecrets: map[string]*auth.Secret{hostNQN: cs}})
	for _, bc := range []struct {
		name string
		addr string
		cfg  initiator.Config
	}{
		{"open", open, initiator.Config{SubNQN: subNQN + "-open"}},
		{"null", authed, initiator.Config{DHCHAPSecret: hs, DHCHAPCtrlSecret: cs, DHGroups: []uint8{auth.DHNull}}},
		{"ffdhe2048", authed, initiator.Config{DHCHAPSecret: hs, DHCHAPCtrlSecret: cs, DHGroups: []uint8{auth.DHFFDHE2048}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := bc.cfg
			if cfg.SubNQN == "" {
				cfg.SubNQN = subNQN
			}
			cfg.HostNQN = hostNQN
			ctx := context.Background()
			for b.Loop() {
				c, err := initiator.Dial(ctx, bc.addr, cfg)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
