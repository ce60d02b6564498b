package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
)

func dhchapSecret(t *testing.T, hh int) string {
	key := make([]byte, 32)
	rand.Read(key)
	raw := binary.LittleEndian.AppendUint32(key, crc32.ChecksumIEEE(key))
	return fmt.Sprintf("DHHC-1:%02d:%s:", hh, base64.StdEncoding.EncodeToString(raw))
}

// TestNOFAuthentication: an appliance whose NVMe/TCP target requires
// DH-HMAC-CHAP (--nvme-host-key) serves NOF replicas only to a client that
// authenticates: the right secret puts and gets, no secret and a wrong
// secret are refused (by the SDK and by `kvtier nvme`), and the refusals
// are counted in GET /api/v1/nvme.
func TestNOFAuthentication(t *testing.T) {
	c := startCluster(t)
	dir := t.TempDir()
	host, ctrlHost := "nqn.2026-11.io.kvtier:gpu-1", "nqn.2026-11.io.kvtier:gpu-2"
	good, ctrlKey, wrong := dhchapSecret(t, 1), dhchapSecret(t, 0), dhchapSecret(t, 1)
	keyFile := filepath.Join(dir, "gpu-1.key")
	if err := os.WriteFile(keyFile, []byte(good+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	box := c.appliance("auth-box", "--nvme-addr", "127.0.0.1:0", "--nvme-namespace", filepath.Join(dir, "ns.img")+":32MiB",
		"--nvme-host-key", host+"=@"+keyFile, "--nvme-host-key", ctrlHost+"="+good, "--nvme-ctrl-key", ctrlHost+"="+ctrlKey)
	nvmeAddr := box.addrs["nvme"]
	ctx := context.Background()
	nof := client.WithOptions(client.PutOptions{NOFReplicas: 1})
	v := randomBytes(77, 100<<10)

	// Right secret (from a file), unidirectional and bidirectional.
	cl := c.clientWith(t, client.Config{NVMeHostNQN: host, NVMeSecret: "@" + keyFile})
	if err := cl.Put(ctx, "auth/a", v, nof); err != nil {
		t.Fatalf("put with the right secret: %v", err)
	}
	if got, err := cl.Get(ctx, "auth/a"); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get with the right secret: %v", err)
	}
	bidi := c.clientWith(t, client.Config{NVMeHostNQN: ctrlHost, NVMeSecret: good, NVMeCtrlSecret: ctrlKey})
	if got, err := bidi.Get(ctx, "auth/a"); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get with bidirectional authentication: %v", err)
	}

	// No secret, a wrong secret, a wrong controller secret: refused.
	for name, cfg := range map[string]client.Config{
		"no secret":               {NVMeHostNQN: host},
		"wrong secret":            {NVMeHostNQN: host, NVMeSecret: wrong},
		"host without a key":      {NVMeHostNQN: "nqn.2026-11.io.kvtier:stranger", NVMeSecret: good},
		"wrong controller secret": {NVMeHostNQN: ctrlHost, NVMeSecret: good, NVMeCtrlSecret: wrong},
	} {
		bad := c.clientWith(t, cfg)
		if _, err := bad.Get(ctx, "auth/a"); err == nil {
			t.Fatalf("%s: get succeeded", name)
		}
		if err := bad.Put(ctx, "auth/"+strings.ReplaceAll(name, " ", "-"), v, nof); err == nil {
			t.Fatalf("%s: put succeeded", name)
		}
	}
	if got, err := cl.Get(ctx, "auth/a"); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("object changed after the refused hosts: %v", err)
	}
	if _, err := client.New(ctx, client.Config{MasterAddr: c.grpc, OneShot: true, NVMeSecret: "DHHC-1:00:bad:"}); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("a malformed secret: %v", err)
	}

	// The operator's initiator: flag, environment, none, wrong.
	if out, errs, code := c.cli(t, nil, "nvme", "identify", "--target", nvmeAddr, "--host-nqn", host, "--dhchap-secret", "@"+keyFile); code != 0 || !strings.Contains(out, "namespace 1") {
		t.Fatalf("kvtier nvme identify with the secret: exit %d\n%s\n%s", code, out, errs)
	}
	if _, errs, code := c.cli(t, nil, "nvme", "identify", "--target", nvmeAddr, "--host-nqn", host); code == 0 || !strings.Contains(errs, "authentication") {
		t.Fatalf("kvtier nvme identify without a secret: exit %d\n%s", code, errs)
	}
	if _, errs, code := c.cli(t, nil, "nvme", "identify", "--target", nvmeAddr, "--host-nqn", host, "--dhchap-secret", wrong); code == 0 || !strings.Contains(errs, "authentication failed") {
		t.Fatalf("kvtier nvme identify with a wrong secret: exit %d\n%s", code, errs)
	}

	// A host that ignores ATR (hand-driven over TCP, with an NQN that has
	// a key): Connect answers with ATR, every other command is refused as
	// Authentication Required, so the controller never enables and no I/O
	// queue can be connected.
	rawIgnoringATR(t, nvmeAddr, box.addrs["nqn"], host)
	if got, err := cl.Get(ctx, "auth/a"); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("object changed after the raw host: %v", err)
	}

	// Counted, as the appliance reports them.
	var st struct {
		Appliances []struct {
			Node string `json:"node"`
			Auth struct{ Succeeded, Failed, Refused uint64 }
		} `json:"appliances"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get("http://" + c.http + "/api/v1/nvme")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		if len(st.Appliances) == 1 && st.Appliances[0].Auth.Failed >= 3 && st.Appliances[0].Auth.Refused >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("authentication counters never showed the refusals: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a := st.Appliances[0].Auth; a.Succeeded < 3 {
		t.Fatalf("auth counters %+v: want the successful queues counted", a)
	}
}

func rawIgnoringATR(t *testing.T, addr, sub, host string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	w, r := pdu.NewWriter(nc), pdu.NewReader(nc, pdu.ReaderConfig{Side: pdu.HostSide})
	cpl := func(m pdu.Message) pdu.Completion {
		t.Helper()
		if err := w.Send(m); err != nil {
			t.Fatal(err)
		}
		for {
			f, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if f.Type == pdu.TypeICResp {
				return pdu.Completion{}
			}
			if f.Type == pdu.TypeCapsuleResp {
				return f.Completion()
			}
		}
	}
	cpl(&pdu.ICReq{})
	r.SetNegotiated(pdu.Options{})
	cd := nvme.ConnectData{CNTLID: 0xFFFF, SubNQN: sub, HostNQN: host}
	c := cpl(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 1, NSID: uint32(nvme.FabricsConnect),
		SGL: pdu.SGL{Len: 1024, Type: pdu.SGLInCapsule}, CDW11: 31}, Data: cd.Marshal()})
	if !c.OK() || c.DW0&nvme.ConnectATR == 0 {
		t.Fatalf("connect: %+v, want success with ATR", c)
	}
	c = cpl(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 2, NSID: uint32(nvme.FabricsPropSet),
		CDW11: nvme.PropCC, CDW12: 0x00460001}})
	if c.SCT() != nvme.SCTSpecific || c.SC() != nvme.SCAuthRequired {
		t.Fatalf("enable without authentication: %+v", c)
	}
	c = cpl(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.AdminIdentify, Flags: 0x40, CID: 3, CDW10: 1,
		SGL: pdu.SGL{Len: 4096, Type: pdu.SGLTransport}}})
	if c.SCT() != nvme.SCTSpecific || c.SC() != nvme.SCAuthRequired {
		t.Fatalf("identify without authentication: %+v", c)
	}
}
