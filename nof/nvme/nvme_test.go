package nvme_test

import (
	"errors"
	"testing"

	"github.com/kvtier/kvtier/nof/nvme"
)

func TestConnectData(t *testing.T) {
	c := nvme.ConnectData{HostID: [16]byte{1, 2, 3}, CNTLID: 0xFFFF, SubNQN: "nqn.a:b", HostNQN: "nqn.c:d"}
	b := c.Marshal()
	if len(b) != 1024 || b[16] != 0xFF || string(b[256:263]) != "nqn.a:b" || string(b[512:519]) != "nqn.c:d" {
		t.Fatalf("layout %x", b[:32])
	}
	got, err := nvme.ParseConnectData(b)
	if err != nil || got != c {
		t.Fatalf("round trip %+v %v", got, err)
	}
	if _, err := nvme.ParseConnectData(b[:1000]); err == nil {
		t.Fatal("short connect data accepted")
	}
}

func TestIdentifyRoundTrip(t *testing.T) {
	id := nvme.IdentifyController{Serial: "S1", Model: "M", Firmware: "F", MDTS: 5, CNTLID: 7, Version: 0x10300, CtrlType: 1,
		KAS: 10, SQES: 0x66, CQES: 0x44, MAXCMD: 128, NN: 3, ONCS: 0xC, SGLS: 1, SubNQN: "nqn.x:y", IOCCSZ: 260, IORCSZ: 1}
	b := id.Marshal()
	if b[4] != 'S' || b[5] != '1' || b[6] != ' ' || b[77] != 5 || b[512] != 0x66 {
		t.Fatal("identify controller layout")
	}
	got, err := nvme.ParseIdentifyController(b)
	if err != nil || got != id {
		t.Fatalf("round trip\n%+v\n%+v", got, id)
	}
	ns := nvme.IdentifyNamespace{NSZE: 100, NCAP: 100, NUSE: 100, LBADS: 12, NGUID: [16]byte{9}}
	gn, err := nvme.ParseIdentifyNamespace(ns.Marshal())
	if err != nil || gn != ns || gn.BlockSize() != 4096 {
		t.Fatalf("namespace %+v", gn)
	}
	if l := nvme.ParseActiveNSList(nvme.ActiveNSList([]uint32{1, 2, 5}, 1)); len(l) != 2 || l[0] != 2 || l[1] != 5 {
		t.Fatalf("ns list %v", l)
	}
}

func TestDiscoveryLog(t *testing.T) {
	e := []nvme.DiscoveryEntry{{TrType: 3, AdrFam: 1, SubType: 2, TReq: 2, CNTLID: 0xFFFF, ASQSZ: 128, TrSvcID: "4420", SubNQN: "nqn.a:b", TrAddr: "127.0.0.1"}}
	b := nvme.DiscoveryLog(7, e)
	if len(b) != 2048 || b[1024+32] != '4' || b[1024+36] != ' ' {
		t.Fatal("discovery layout")
	}
	gen, n, got, err := nvme.ParseDiscoveryLog(b)
	if err != nil || gen != 7 || n != 1 || len(got) != 1 || got[0] != e[0] {
		t.Fatalf("round trip %v %v %+v", gen, err, got)
	}
	// a header-only read (as hosts do first) parses with no entries
	if _, n, got, err := nvme.ParseDiscoveryLog(b[:1024]); err != nil || n != 1 || len(got) != 0 {
		t.Fatal("header only")
	}
}

func TestStatus(t *testing.T) {
	e := nvme.Errf(nvme.SCTSpecific, nvme.SCConnectInvalidHost)
	err := nvme.StatusFrom(e.Status(), 5)
	var se *nvme.StatusError
	if !errors.As(err, &se) || se.SCT != 1 || se.SC != 0x84 || !se.DNR || se.DW0 != 5 {
		t.Fatalf("%v", err)
	}
	if nvme.StatusFrom(1, 0) != nil { // phase bit only
		t.Fatal("phase bit treated as error")
	}
}
