package spdk_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/spdk"
	"github.com/kvtier/kvtier/nof/spdk/spdktest"
)

// TestManagerDHCHAPKeys drives the keyring half of a plan against the named
// fake: keys added once (a re-apply adds nothing), every host of HostKeys
// allowed with its keys and the subsystem no longer open to any host, a
// changed binding re-set with nvmf_subsystem_set_keys, a key of the plan's
// name with another path a conflict, a key file SPDK would refuse (group
// readable) an error naming keyring_file_add_key, and a teardown that
// removes the keys.
func TestManagerDHCHAPKeys(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode) spdk.KeySpec {
		p := filepath.Join(dir, name+".key")
		if err := os.WriteFile(p, []byte("DHHC-1:00:"+strings.Repeat("A", 48)+":"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return spdk.KeySpec{Name: name, Path: p}
	}
	e.plan.Keys = []spdk.KeySpec{mk("h1", 0o600), mk("c1", 0o600)}
	e.plan.Subsystem.Hosts = []string{gpuHost2}
	e.plan.Subsystem.HostKeys = map[string]spdk.HostKeys{gpuHost1: {Key: "h1", CtrlrKey: "c1"}}
	if _, err := e.mgr.Apply(ctx, e.plan); err != nil {
		t.Fatal(err)
	}
	s := e.subsystem(t)
	if s.AllowAnyHost || len(s.Hosts) != 2 {
		t.Fatalf("hosts %+v, allow any %v", s.Hosts, s.AllowAnyHost)
	}
	for _, h := range s.Hosts {
		want := e.plan.Subsystem.HostKeys[h.Nqn]
		if h.DhchapKey != want.Key || h.DhchapCtrlrKey != want.CtrlrKey {
			t.Fatalf("host %+v, want keys %+v", h, want)
		}
	}
	adds := e.fake.Calls("keyring_file_add_key")
	if _, err := e.mgr.Apply(ctx, e.plan); err != nil {
		t.Fatal(err)
	}
	if n := e.fake.Calls("keyring_file_add_key"); n != adds || e.fake.Calls("nvmf_subsystem_set_keys") != 0 {
		t.Fatalf("re-apply added %d keys, set keys %d times", n-adds, e.fake.Calls("nvmf_subsystem_set_keys"))
	}
	// Unidirectional now: the controller key is cleared in place.
	e.plan.Subsystem.HostKeys = map[string]spdk.HostKeys{gpuHost1: {Key: "h1"}}
	if _, err := e.mgr.Apply(ctx, e.plan); err != nil {
		t.Fatal(err)
	}
	if k, ck, ok := e.fake.HostKeys(applianceNQN, gpuHost1); !ok || k != "h1" || ck != "" || e.fake.Calls("nvmf_subsystem_set_keys") != 1 {
		t.Fatalf("after set_keys: %q %q %v", k, ck, ok)
	}
	// The same name at another path belongs to someone else.
	moved := e.plan
	moved.Keys = []spdk.KeySpec{{Name: "h1", Path: filepath.Join(dir, "elsewhere.key")}, e.plan.Keys[1]}
	if _, err := e.mgr.Apply(ctx, moved); !errors.Is(err, spdk.ErrConflict) {
		t.Fatalf("key at another path: %v", err)
	}
	// SPDK refuses a key file others may read.
	loose := e.plan
	loose.Keys = append(append([]spdk.KeySpec{}, e.plan.Keys...), mk("loose", 0o640))
	if _, err := e.mgr.Apply(ctx, loose); err == nil || !strings.Contains(err.Error(), "keyring_file_add_key loose") {
		t.Fatalf("group-readable key file: %v", err)
	}
	if err := e.mgr.Teardown(ctx, e.plan); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"h1", "c1"} {
		if _, ok := e.fake.KeyPath(k); ok {
			t.Fatalf("teardown left key %s", k)
		}
	}
}

// Plans with bad keys are refused before any request.
func TestManagerRejectsBadKeys(t *testing.T) {
	e := newEnv(t, spdktest.Options{})
	for _, mod := range []func(p *spdk.Plan){
		func(p *spdk.Plan) { p.Keys = []spdk.KeySpec{{Name: "k", Path: "relative.key"}} },
		func(p *spdk.Plan) { p.Keys = []spdk.KeySpec{{Name: "k/1", Path: "/k"}} },
		func(p *spdk.Plan) { p.Keys = []spdk.KeySpec{{Name: "k", Path: "/a"}, {Name: "k", Path: "/b"}} },
		func(p *spdk.Plan) { p.Subsystem.HostKeys = map[string]spdk.HostKeys{gpuHost1: {Key: "missing"}} },
		func(p *spdk.Plan) {
			p.Keys = []spdk.KeySpec{{Name: "c", Path: "/c"}}
			p.Subsystem.HostKeys = map[string]spdk.HostKeys{gpuHost1: {CtrlrKey: "c"}}
		},
		func(p *spdk.Plan) {
			p.Keys = []spdk.KeySpec{{Name: "k", Path: "/k"}}
			p.Subsystem.HostKeys = map[string]spdk.HostKeys{"bogus": {Key: "k"}}
		},
	} {
		p := e.plan
		mod(&p)
		if _, err := e.mgr.Apply(context.Background(), p); !kverr.Is(err, kverr.InvalidParams) {
			t.Fatalf("%+v %+v: %v", p.Keys, p.Subsystem.HostKeys, err)
		}
	}
	if n := e.fake.MutatingCalls(); n != 0 {
		t.Fatalf("%d mutating calls for bad plans", n)
	}
}
