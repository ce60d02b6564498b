package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/kvtier/kvtier/kverr"
)

// Every flag of every server command (and the settings they inherit from the
// root) is documented in deploy/kvtier.example.yaml, in the command's section
// or at the top level.
func TestExampleConfigHasEveryFlag(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/kvtier.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	for _, name := range []string{"standalone", "master", "appliance"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("no %s command: %v", name, err)
		}
		sec, _ := doc[name].(map[string]any)
		if sec == nil {
			t.Fatalf("no %s section", name)
		}
		check := func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" || f.Name == "config" || f.Name == "version" {
				return
			}
			_, inSec := sec[f.Name]
			_, top := doc[f.Name]
			if !inSec && !top {
				t.Errorf("--%s of %s is not in deploy/kvtier.example.yaml", f.Name, name)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		cmd.InheritedFlags().VisitAll(check)
	}
	// And the file is accepted as it is by each command.
	for name, mk := range serverCommands() {
		c := mk()
		c.Flags().String("config", "", "")
		if err := c.ParseFlags([]string{"--config", "../../deploy/kvtier.example.yaml"}); err != nil {
			t.Fatal(err)
		}
		if err := applySettings(c); err != nil {
			t.Errorf("%s refuses the example configuration: %v", name, err)
		}
	}
}

// Precedence: flag > KVTIER_* environment > config file > default, and the
// source of each is recorded for config print; secrets are masked.
func TestSettingsPrecedence(t *testing.T) {
	path := t.TempDir() + "/k.yaml"
	if err := os.WriteFile(path, []byte("appliance:\n  dram: 64MiB\n  ssd-capacity: 2GiB\n  name: fromfile\nlog-level: debug\nstandalone:\n  http-token: filetoken\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVTIER_SSD_CAPACITY", "3GiB")
	t.Setenv("KVTIER_NAME", "fromenv")
	c := serverCommands()["appliance"]()
	c.Flags().String("config", "", "")
	if err := c.ParseFlags([]string{"--config", path, "--name", "fromflag"}); err != nil {
		t.Fatal(err)
	}
	if err := applySettings(c); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{"name": {"fromflag", sourceFlag}, "ssd-capacity": {"3GiB", sourceEnv},
		"dram": {"64MiB", sourceFile}, "log-level": {"debug", sourceFile}, "hugepages": {"auto", sourceDefault}}
	got := map[string]setting{}
	for _, s := range effectiveSettings(c) {
		got[s.Name] = s
	}
	for n, w := range want {
		if got[n].Value != w[0] || got[n].Source != w[1] {
			t.Errorf("%s = %+v, want %s from %s", n, got[n], w[0], w[1])
		}
	}
	s := serverCommands()["standalone"]()
	s.Flags().String("config", "", "")
	_ = s.ParseFlags([]string{"--config", path})
	if err := applySettings(s); err != nil {
		t.Fatal(err)
	}
	for _, st := range effectiveSettings(s) {
		if st.Name == "http-token" && (st.Value != "********" || strings.Contains(st.Value, "filetoken")) {
			t.Errorf("token printed: %+v", st)
		}
	}
	// NVMe DH-HMAC-CHAP keys are secrets too.
	a := serverCommands()["appliance"]()
	a.Flags().String("config", "", "")
	const key = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	_ = a.ParseFlags([]string{"--nvme-host-key", "nqn.2026-11.io.kvtier:h=" + key, "--nvme-ctrl-key", "nqn.2026-11.io.kvtier:h=" + key})
	if err := applySettings(a); err != nil {
		t.Fatal(err)
	}
	masked := 0
	for _, st := range effectiveSettings(a) {
		if strings.Contains(st.Value, "DHHC-1") {
			t.Errorf("NVMe secret printed: %+v", st)
		}
		if (st.Name == "nvme-host-key" || st.Name == "nvme-ctrl-key") && st.Value == "********" {
			masked++
		}
	}
	if masked != 2 {
		t.Errorf("%d of the 2 NVMe key settings masked", masked)
	}
	t.Setenv("KVTIER_DRAM", "lots")
	c = serverCommands()["appliance"]()
	c.Flags().String("config", "", "")
	_ = c.ParseFlags(nil)
	if err := applySettings(c); err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "KVTIER_DRAM") {
		t.Errorf("a bad environment value: %v (exit %d)", err, exitCode(err))
	}
}

// Every kvtier error code has an exit code in the one table.
func TestEveryCodeHasAnExitCode(t *testing.T) {
	for _, c := range kverr.Codes() {
		if _, ok := exitCodes[c]; !ok {
			t.Errorf("%s has no exit code", c)
		}
	}
	cases := map[error]int{
		kverr.New(kverr.ObjectNotFound, "k", "x"):    exitNotFound,
		kverr.New(kverr.RPCFail, "", "x"):            exitUnavailable,
		kverr.New(kverr.ObjectHasLease, "k", "x"):    exitRefused,
		kverr.New(kverr.NoAvailableHandle, "k", "x"): exitNoSpace,
		kverr.New(kverr.Unauthorized, "", "x"):       exitAuth,
		kverr.New(kverr.ChecksumMismatch, "k", "x"):  exitData,
		usagef("bad"):                  exitUsage,
		exitError{code: exitHostCheck}: exitHostCheck,
		os.ErrNotExist:                 exitUsage,
	}
	for err, want := range cases {
		if got := exitCode(err); got != want {
			t.Errorf("exitCode(%v) = %d, want %d", err, got, want)
		}
	}
}

// Minimum DRAM and segment sizes are refused before anything is mapped.
func TestDRAMValidation(t *testing.T) {
	for _, tc := range []struct {
		dram, seg uint64
		ok        bool
	}{{0, 0, false}, {256 << 20, 0, true}, {256 << 20, 1 << 10, false}, {256 << 20, 1 << 20, true},
		{64 << 30, 1 << 20, false}, {64 << 30, 16 << 20, true}, {1 << 20, 2 << 20, false}} {
		f := applianceFlags{dramSize: sizeValue(tc.dram), segmentSize: sizeValue(tc.seg)}
		err := f.validateDRAM()
		if (err == nil) != tc.ok || (err != nil && exitCode(err) != exitUsage) {
			t.Errorf("dram %d segment %d: %v", tc.dram, tc.seg, err)
		}
	}
}

// FuzzConfigFile: any file content either is refused with a usage error or
// sets flags; it never panics and never sets a flag given on the command
// line.
func FuzzConfigFile(f *testing.F) {
	for _, s := range []string{"dram: 64MiB\n", "appliance:\n  dram: 1GiB\n  nvme-namespace: [a, b]\n", "standalone: 3\n",
		"log-level: [x]\n", "etcd: []\n", "bogus:\n  x: 1\n", "- a\n- b\n", "name: ~\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		path := t.TempDir() + "/c.yaml"
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		c := serverCommands()["appliance"]()
		c.Flags().String("config", "", "")
		if err := c.ParseFlags([]string{"--config", path, "--name", "cli"}); err != nil {
			t.Fatal(err)
		}
		if err := applyConfigFile(c); err != nil {
			if exitCode(err) != exitUsage {
				t.Fatalf("config error %v exits %d, want %d", err, exitCode(err), exitUsage)
			}
			return
		}
		if v, _ := c.Flags().GetString("name"); v != "cli" {
			t.Fatalf("the file overrode a command-line flag: name=%q", v)
		}
	})
}

// TestUnknownVerbOfAGroup: a group of verbs given an unknown verb is a
// usage error (exit 2) naming it, at any depth; the group alone prints its
// help and succeeds; an unknown top-level command stays a usage error.
func TestUnknownVerbOfAGroup(t *testing.T) {
	for _, tc := range []struct {
		args []string
		bad  string // "" = succeeds
	}{
		{[]string{"tiers", "sett"}, `"sett" for "kvtier tiers"`},
		{[]string{"config", "standalone"}, `"standalone" for "kvtier config"`},
		{[]string{"nvme", "discovr"}, `"discovr" for "kvtier nvme"`},
		{[]string{"bogus"}, `"bogus" for "kvtier"`},
		{[]string{"tiers"}, ""},
		{[]string{"nvme"}, ""},
	} {
		root := newRoot()
		root.SetArgs(tc.args)
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.Execute()
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%v: %v, want its help", tc.args, err)
		case tc.bad == "" && !strings.Contains(out.String(), "Available Commands"):
			t.Errorf("%v printed %q, want its help", tc.args, out.String())
		case tc.bad != "" && (err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%v: %v (exit %d), want a usage error naming %s", tc.args, err, exitCode(err), tc.bad)
		}
	}
}
