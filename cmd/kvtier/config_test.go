package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseSize(t *testing.T) {
	cases := map[string]uint64{"1GiB": 1 << 30, "512MiB": 512 << 20, "4KiB": 4096, "1G": 1 << 30, "100MB": 100e6, "123": 123, "1.5GiB": 3 << 29}
	for in, want := range cases {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1GiB", "abc", "1XB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

func TestConfigFileFillsUnsetFlagsOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kvtier.yaml")
	if err := os.WriteFile(path, []byte("dram: 64MiB\nhugepages: off\nname: fromfile\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := newApplianceCmd()
	cmd.Flags().String("config", "", "")
	if err := cmd.ParseFlags([]string{"--config", path, "--name", "cli"}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfigFile(cmd); err != nil {
		t.Fatal(err)
	}
	if v := cmd.Flags().Lookup("dram").Value.String(); v != "64MiB" {
		t.Errorf("dram = %s, want 64MiB from file", v)
	}
	if v, _ := cmd.Flags().GetString("name"); v != "cli" {
		t.Errorf("name = %s; the command line must win", v)
	}
	if err := os.WriteFile(path, []byte("dramm: 1GiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd2 := newApplianceCmd()
	cmd2.Flags().String("config", "", "")
	_ = cmd2.ParseFlags([]string{"--config", path})
	if err := applyConfigFile(cmd2); err == nil {
		t.Error("an unknown setting in the config file was accepted")
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1GiB", "0", "1.5MiB", "12KB", "", "-3", "9e99G", "NaN", "Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			return
		}
		if n > 1<<62 {
			t.Fatalf("parseSize(%q) = %d beyond the documented limit", s, n)
		}
		// A formatted size parses back to itself.
		if back, err := parseSize(formatSize(n)); err != nil || back != n {
			t.Fatalf("formatSize(%d)=%q parses to %d, %v", n, formatSize(n), back, err)
		}
	})
}
