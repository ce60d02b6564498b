package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
)

// TestSPDKBackendDHCHAPReal drives `kvtier appliance --nvme-backend spdk`
// with --nvme-host-key/--nvme-ctrl-key against a real SPDK nvmf_tgt (from
// $KVTIER_SPDK_DIR, a built SPDK tree; skipped, saying so, without one:
// CI has no SPDK, and appliance's TestSPDKBackendDHCHAP covers the same
// path against the named fake): the secrets land in SPDK's keyring as 0600
// files, a client with the host and controller secrets puts a NOF replica
// into SPDK's malloc bdev and gets it back, `kvtier nvme identify`
// authenticates, and a client without the secret is refused.
func TestSPDKBackendDHCHAPReal(t *testing.T) {
	spdkDir := os.Getenv("KVTIER_SPDK_DIR")
	if spdkDir == "" {
		t.Skip("no SPDK: set KVTIER_SPDK_DIR to a built SPDK tree (build/bin/nvmf_tgt) to run against the real target")
	}
	bin := filepath.Join(spdkDir, "build", "bin", "nvmf_tgt")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no SPDK: %v", err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "spdk.sock")
	var tgtOut bytes.Buffer
	tgt := exec.Command(bin, "-m", "0x1", "-r", sock, "--no-huge", "-s", "1024")
	tgt.Stdout, tgt.Stderr = &tgtOut, &tgtOut
	if err := tgt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tgt.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { tgt.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			tgt.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("nvmf_tgt:\n%s", tgtOut.String())
		}
	})
	eventually(t, 20*time.Second, "nvmf_tgt's RPC socket", func() bool { _, err := os.Stat(sock); return err == nil })

	host := "nqn.2026-12.io.kvtier:gpu-spdk"
	hostKey, ctrlKey := dhchapSecret(t, 1), dhchapSecret(t, 0)
	keyFile := filepath.Join(dir, "host.key")
	if err := os.WriteFile(keyFile, []byte(hostKey), 0o600); err != nil {
		t.Fatal(err)
	}
	keyDir := filepath.Join(dir, "spdk-keys")
	c := startCluster(t)
	nvmeAddr := freePort(t)
	box := c.appliance("spdk-auth", "--nvme-backend", "spdk", "--nvme-addr", nvmeAddr, "--spdk-socket", sock,
		"--spdk-malloc", "M0:64MiB", "--spdk-key-dir", keyDir, "--spdk-teardown",
		"--nvme-host-key", host+"=@"+keyFile, "--nvme-ctrl-key", host+"="+ctrlKey)
	for _, f := range []string{"spdk-auth-host1.key", "spdk-auth-ctrl1.key"} {
		st, err := os.Stat(filepath.Join(keyDir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("key file %s: %v %v", f, st, err)
		}
	}

	ctx := context.Background()
	v := randomBytes(18, 200<<10)
	cl := c.clientWith(t, client.Config{NVMeHostNQN: host, NVMeSecret: "@" + keyFile, NVMeCtrlSecret: ctrlKey})
	if err := cl.Put(ctx, "spdk/a", v, client.WithOptions(client.PutOptions{NOFReplicas: 1})); err != nil {
		t.Fatalf("put of a NOF replica through SPDK with DH-HMAC-CHAP: %v", err)
	}
	if got, err := cl.Get(ctx, "spdk/a"); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get through SPDK: %v", err)
	}
	if out, errs, code := c.cli(t, nil, "nvme", "identify", "--target", nvmeAddr, "--nqn", box.addrs["nqn"],
		"--host-nqn", host, "--dhchap-secret", "@"+keyFile, "--dhchap-ctrl-secret", ctrlKey); code != 0 || !strings.Contains(out, "namespace 1") {
		t.Fatalf("kvtier nvme identify against SPDK: exit %d\n%s\n%s", code, out, errs)
	}
	bad := c.clientWith(t, client.Config{NVMeHostNQN: host})
	if err := bad.Put(ctx, "spdk/b", v, client.WithOptions(client.PutOptions{NOFReplicas: 1})); err == nil || !strings.Contains(err.Error(), "authentication") {
		t.Fatalf("put without the secret: %v", err)
	}
	box.stop(t)
	if _, err := os.Stat(filepath.Join(keyDir, "spdk-auth-host1.key")); !os.IsNotExist(err) {
		t.Fatalf("--spdk-teardown left the key file: %v", err)
	}
}
