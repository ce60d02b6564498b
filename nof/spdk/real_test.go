package spdk_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/spdk"
)

// realSPDK starts SPDK's nvmf_tgt from $KVTIER_SPDK_DIR (a built SPDK
// tree, see nof/spdkcompare/run.sh) without hugepages, on a socket of its
// own, and returns a client; it skips, saying why, when there is none (CI
// has no SPDK).
func realSPDK(t *testing.T) *spdk.Client {
	t.Helper()
	dir := os.Getenv("KVTIER_SPDK_DIR")
	if dir == "" {
		t.Skip("no SPDK: set KVTIER_SPDK_DIR to a built SPDK tree (build/bin/nvmf_tgt) to run against the real target")
	}
	bin := filepath.Join(dir, "build", "bin", "nvmf_tgt")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no SPDK: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "spdk.sock")
	var out bytes.Buffer
	cmd := exec.Command(bin, "-m", "0x1", "-r", sock, "--no-huge", "-s", "1024")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("nvmf_tgt output:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nvmf_tgt did not open %s: %s", sock, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, err := spdk.New(spdk.Config{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func keyFile(t *testing.T, dir, name string, s *auth.Secret) spdk.KeySpec {
	t.Helper()
	path := filepath.Join(dir, name+".key")
	if err := os.WriteFile(path, []byte(s.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return spdk.KeySpec{Name: name, Path: path}
}

// TestRealSPDKDHCHAP: the Manager makes a real SPDK nvmf_tgt require
// DH-HMAC-CHAP (keyring_file keys, hosts bound to them), and our initiator
// authenticates against it, bidirectionally for one host and one way for
// another, then writes and reads back; a wrong secret, a missing one and a
// host without keys are refused. Skipped without SPDK (see realSPDK).
func TestRealSPDKDHCHAP(t *testing.T) {
	c := realSPDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	secret := func(b byte) *auth.Secret { return &auth.Secret{Key: bytes.Repeat([]byte{b}, 32), Transform: 1} }
	h1, c1, h2 := secret(1), secret(2), secret(3)
	port := freePort(t)
	plan := spdk.Plan{
		Mallocs: []spdk.MallocSpec{{Name: "Malloc0", Size: 16 << 20}},
		Keys:    []spdk.KeySpec{keyFile(t, dir, "h1", h1), keyFile(t, dir, "c1", c1), keyFile(t, dir, "h2", h2)},
		Subsystem: spdk.SubsystemSpec{
			NQN:      applianceNQN,
			HostKeys: map[string]spdk.HostKeys{gpuHost1: {Key: "h1", CtrlrKey: "c1"}, gpuHost2: {Key: "h2"}},
			Listen:   spdk.ListenAddress{Trtype: "TCP", Adrfam: "IPv4", Traddr: "127.0.0.1", Trsvcid: port},
		},
	}
	m := spdk.NewManager(c)
	if _, err := m.Apply(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, plan); err != nil {
		t.Fatalf("second apply (idempotence against the real SPDK): %v", err)
	}
	subs, err := c.NvmfGetSubsystems(ctx, spdk.NvmfGetSubsystemsParams{Nqn: applianceNQN})
	if err != nil || len(subs) != 1 || subs[0].AllowAnyHost || len(subs[0].Hosts) != 2 {
		t.Fatalf("SPDK's subsystem: %+v %v", subs, err)
	}
	for _, h := range subs[0].Hosts {
		if want := plan.Subsystem.HostKeys[h.Nqn]; h.DhchapKey != want.Key || h.DhchapCtrlrKey != want.CtrlrKey {
			t.Fatalf("SPDK reports host %+v, plan %+v", h, want)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	dial := func(host string, hs, cs *auth.Secret) (*initiator.Controller, error) {
		return initiator.Dial(ctx, addr, initiator.Config{SubNQN: applianceNQN, HostNQN: host, DHCHAPSecret: hs, DHCHAPCtrlSecret: cs, KeepAlive: -1})
	}
	for _, tc := range []struct {
		host   string
		hs, cs *auth.Secret
	}{{gpuHost1, h1, c1}, {gpuHost2, h2, nil}} {
		ctrl, err := dial(tc.host, tc.hs, tc.cs)
		if err != nil {
			t.Fatalf("%s authenticating (controller secret %v) against SPDK: %v", tc.host, tc.cs != nil, err)
		}
		data := bytes.Repeat([]byte(tc.host[len(tc.host)-5:]), 4096/5+1)[:4096]
		if err := ctrl.WriteAt(ctx, 1, data, 8192); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4096)
		if err := ctrl.ReadAt(ctx, 1, got, 8192); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back through SPDK: %v, equal %v", err, bytes.Equal(got, data))
		}
		ctrl.Close()
	}
	for _, tc := range []struct {
		what   string
		host   string
		hs, cs *auth.Secret
		why    string
	}{
		{"wrong host secret", gpuHost1, h2, nil, "controller sent Failure1"},
		{"no host secret", gpuHost1, nil, nil, "no DH-HMAC-CHAP secret"},
		{"wrong controller secret", gpuHost1, h1, h2, "does not match the controller secret"},
		{"host without keys", "nqn.2026-11.io.kvtier:stranger", h1, nil, "host not allowed"},
	} {
		if ctrl, err := dial(tc.host, tc.hs, tc.cs); err == nil {
			ctrl.Close()
			t.Fatalf("%s: SPDK let us in", tc.what)
		} else if !kverr.Is(err, kverr.Unauthorized) || !strings.Contains(err.Error(), tc.why) {
			t.Fatalf("%s: refused with %v, want an Unauthorized error saying %q", tc.what, err, tc.why)
		} else {
			t.Logf("%s: refused: %v", tc.what, err)
		}
	}
	if err := m.Teardown(ctx, plan); err != nil {
		t.Fatal(err)
	}
	keys, err := c.KeyringGetKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !k.Removed {
			t.Fatalf("teardown left key %+v", k)
		}
	}
}
