package spdktest

import (
	"bytes"
	"net"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

var idRE = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9A-F]{32}`)

// sameModuloIDs compares two replies after renaming the fake's UUIDs/NGUIDs
// to the recorded ones, pairwise in order of appearance.
func sameModuloIDs(got, want []byte) bool {
	g, w := idRE.FindAll(got, -1), idRE.FindAll(want, -1)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		got = bytes.ReplaceAll(got, g[i], w[i])
	}
	return bytes.Equal(got, want)
}

// TestFakeFaithful replays the recorded request bytes of the lab bring-up,
// the error cases and the lvol/host/cleanup exchanges against a fresh
// FakeSPDK and requires the recorded reply bytes (UUIDs renamed), so the
// fake the Manager is tested against answers like SPDK v26.05 did.
func TestFakeFaithful(t *testing.T) {
	f := NewFake()
	s, err := Listen(filepath.Join(t.TempDir(), "fake.sock"), f.Handle, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("unix", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exact := []string{"01-spdk_get_version", "02-framework_wait_init", "03-nvmf_create_transport", "04-nvmf_get_transports",
		"05-bdev_malloc_create", "06-nvmf_create_subsystem", "07-nvmf_subsystem_add_ns", "08-nvmf_subsystem_add_listener",
		"09-nvmf_get_subsystems", "10-bdev_get_bdevs", "13-nvmf_subsystem_get_controllers", "14-error-method-not-found",
		"15-error-invalid-params-missing", "16-error-unknown-param", "17-error-duplicate-subsystem", "18-error-bdev-not-found",
		"19-error-duplicate-transport", "20-error-bad-nqn", "21-error-add-ns-missing-bdev",
		"52-bdev_malloc_create-lvs-base", "53-bdev_lvol_create_lvstore", "54-bdev_lvol_create",
		"57-nvmf_subsystem_add_ns-lvol-nsid5", "58-nvmf_subsystem_add_host", "72-nvmf_subsystem_remove_ns",
		"76-bdev_lvol_delete", "77-bdev_lvol_delete_lvstore", "78-nvmf_subsystem_remove_host", "79-nvmf_get_subsystems-final"}
	buf := make([]byte, 64<<10)
	for _, name := range exact {
		e, err := Recording(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(e.Request); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for !bytes.HasSuffix(got, []byte("\n")) {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("%s: %v (got %q)", name, err, got)
			}
			got = append(got, buf[:n]...)
		}
		if !sameModuloIDs(got, e.Response) {
			t.Errorf("%s:\n fake %s\n  lab %s", name, got, e.Response)
		}
	}
	if n := f.Calls("bdev_malloc_create"); n != 3 {
		t.Errorf("bdev_malloc_create calls = %d, want 3", n)
	}
}
