package appliance_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/auth"
)

func testSecret(t *testing.T, b byte) *auth.Secret {
	t.Helper()
	s, err := auth.ParseSecret((&auth.Secret{Key: bytes.Repeat([]byte{b}, 32), Transform: 1}).String())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSPDKBackendDHCHAP: with --nvme-host-key/--nvme-ctrl-key the SPDK
// backend writes each secret to a 0600 file in a 0700 directory, adds it to
// SPDK's keyring (keyring_file_add_key; the named fake checks the file's
// mode and owner as SPDK does), and allows exactly the hosts with secrets,
// each bound to its keys (nvmf_subsystem_add_host dhchap_key /
// dhchap_ctrlr_key). A changed secret is rewritten in place on the next
// start (SPDK reads the file at each use) and a teardown removes keys and
// files. Against a real SPDK: nof/spdk's TestRealSPDKDHCHAP.
func TestSPDKBackendDHCHAP(t *testing.T) {
	ctx := context.Background()
	masterAddr, _ := startMaster(t)
	fake, sock, _ := startFake(t)
	keyDir := filepath.Join(t.TempDir(), "keys")
	const other = "nqn.2026-11.io.kvtier:gpu-2"
	cfg := spdkConfig(t, "box-9", masterAddr, sock, &bytes.Buffer{})
	cfg.NVMe.SPDK.KeyDir = keyDir
	cfg.NVMe.AllowHosts = []string{other} // listed without a secret: refused once secrets are on
	cfg.NVMe.HostSecrets = map[string]*auth.Secret{gpuHost: testSecret(t, 1)}
	cfg.NVMe.CtrlSecrets = map[string]*auth.Secret{gpuHost: testSecret(t, 2)}
	a, err := appliance.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nqn := appliance.SubsystemNQN("box-9")
	key, ckey, ok := fake.HostKeys(nqn, gpuHost)
	if !ok || key != "box-9-host1" || ckey != "box-9-ctrl1" {
		t.Fatalf("host %s on %s: keys %q %q allowed %v", gpuHost, nqn, key, ckey, ok)
	}
	if _, _, ok := fake.HostKeys(nqn, other); ok {
		t.Fatalf("%s has no secret but is allowed", other)
	}
	if st, err := os.Stat(keyDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("key directory: %v %v", st.Mode(), err)
	}
	for name, want := range map[string]*auth.Secret{key: cfg.NVMe.HostSecrets[gpuHost], ckey: cfg.NVMe.CtrlSecrets[gpuHost]} {
		path, ok := fake.KeyPath(name)
		if !ok || filepath.Dir(path) != keyDir {
			t.Fatalf("key %s: path %q in keyring %v", name, path, ok)
		}
		b, err := os.ReadFile(path)
		st, _ := os.Stat(path)
		if err != nil || string(b) != want.String() || st.Mode().Perm() != 0o600 {
			t.Fatalf("key file %s: %q mode %v err %v", path, b, st.Mode(), err)
		}
	}
	a.Close(ctx)

	// A second start with a rotated host secret: same keys and hosts, the
	// file holds the new secret.
	cfg.NVMe.HostSecrets = map[string]*auth.Secret{gpuHost: testSecret(t, 3)}
	a, err = appliance.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	path, _ := fake.KeyPath("box-9-host1")
	if b, _ := os.ReadFile(path); string(b) != testSecret(t, 3).String() {
		t.Fatalf("rotated secret not written: %q", b)
	}
	// Without the controller secret, the host's controller key is cleared
	// (nvmf_subsystem_set_keys).
	a.Close(ctx)
	cfg.NVMe.CtrlSecrets = nil
	a, err = appliance.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if key, ckey, ok := fake.HostKeys(nqn, gpuHost); !ok || key != "box-9-host1" || ckey != "" {
		t.Fatalf("after dropping the controller secret: %q %q %v", key, ckey, ok)
	}
	if err := a.SPDKTeardown(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close(ctx)
	if _, ok := fake.KeyPath("box-9-host1"); ok {
		t.Fatal("teardown left the key in SPDK's keyring")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("teardown left the key file: %v", err)
	}

	// A controller secret without a host secret is refused before SPDK is
	// touched.
	calls := fake.MutatingCalls()
	cfg.NVMe.HostSecrets = nil
	cfg.NVMe.CtrlSecrets = map[string]*auth.Secret{gpuHost: testSecret(t, 2)}
	if _, err := appliance.Start(ctx, cfg); !kverr.Is(err, kverr.InvalidParams) || !strings.Contains(err.Error(), "needs an --nvme-host-key") {
		t.Fatalf("controller secret alone: %v", err)
	}
	if n := fake.MutatingCalls(); n != calls {
		t.Fatalf("a refused config made %d mutating SPDK calls", n-calls)
	}
}
