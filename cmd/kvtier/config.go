package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// applyConfigFile sets every flag named in the --config YAML file that was not
// given on the command line. Unknown names are an error: a typo in a config
// file must not silently fall back to a default.
func applyConfigFile(cmd *cobra.Command) error {
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return usagef("--config: %w", err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return usagef("--config %s: not a YAML mapping: %w", path, err)
	}
	// A top-level key naming a command is a section of settings for that
	// command only (one file serves master, appliance and standalone);
	// its settings win over the file's top-level ones.
	flat := map[string]any{}
	sections := map[string]map[string]any{}
	for name, v := range values {
		sec, isMap := v.(map[string]any)
		if !isMap || cmd.Flags().Lookup(name) != nil {
			flat[name] = v
			continue
		}
		if !isCommandName(cmd, name) {
			return usagef("--config %s: unknown section %q (want a command name: standalone, master, appliance, ...)", path, name)
		}
		sections[name] = sec
	}
	for _, name := range sectionsFor(cmd) {
		for k, sv := range sections[name] {
			flat[k] = sv
		}
	}
	for name, v := range flat {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			if isOtherCommandsFlag(cmd, name) {
				continue // a top-level setting for another command of the same file
			}
			return usagef("--config %s: unknown setting %q for %q", path, name, cmd.Name())
		}
		if f.Changed {
			continue
		}
		var vals []string
		switch x := v.(type) {
		case []any:
			if len(x) == 0 {
				continue // an empty list is the default
			}
			for _, p := range x {
				vals = append(vals, fmt.Sprint(p))
			}
			if f.Value.Type() != "stringArray" {
				vals = []string{strings.Join(vals, ",")} // slices split on commas
			}
		case nil:
			vals = []string{""}
		default:
			vals = []string{fmt.Sprint(x)}
		}
		for _, s := range vals {
			if err := cmd.Flags().Set(name, s); err != nil {
				return usagef("--config %s: %s: %w", path, name, err)
			}
		}
		setSource(f, sourceFile)
	}
	return nil
}

// sectionsFor lists the sections that apply to cmd, the later winning:
// its own, and for doctor the appliance's and the standalone's settings it
// checks the host against.
func sectionsFor(cmd *cobra.Command) []string {
	if cmd.Name() == "doctor" {
		return []string{"appliance", "standalone", "doctor"}
	}
	return []string{cmd.Name()}
}

// isCommandName reports whether name is a kvtier command (a config section).
func isCommandName(cmd *cobra.Command, name string) bool {
	if _, ok := serverCommands()[name]; ok {
		return true
	}
	if cmd.HasParent() {
		for _, c := range cmd.Root().Commands() {
			if c.Name() == name {
				return true
			}
		}
	}
	return false
}

// isOtherCommandsFlag reports whether name is a setting of another server
// command, so a top-level key shared by one file's commands (grpc-addr for
// master and standalone) is not an error for the appliance.
func isOtherCommandsFlag(cmd *cobra.Command, name string) bool {
	for n, mk := range serverCommands() {
		if n != cmd.Name() && mk().Flags().Lookup(name) != nil {
			return true
		}
	}
	return false
}

// sizeValue is a byte size flag accepting 1GiB, 512MiB, 4KiB, 1G, 100M, 123.
type sizeValue uint64

var _ pflag.Value = (*sizeValue)(nil)

func (s *sizeValue) String() string { return formatSize(uint64(*s)) }
func (s *sizeValue) Type() string   { return "size" }
func (s *sizeValue) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

func parseSize(v string) (uint64, error) {
	s := strings.TrimSpace(v)
	units := []struct {
		suffix string
		mult   uint64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			mult = u.mult
			s = strings.TrimSpace(strings.TrimSuffix(s, u.suffix))
			break
		}
	}
	if s == "" {
		return 0, fmt.Errorf("size %q: no number", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (KiB, MiB, GiB, TiB, KB, MB, GB)", v)
	}
	out := f * float64(mult)
	if !(out <= 1<<62) {
		return 0, fmt.Errorf("size %q is too large", v)
	}
	return uint64(out), nil
}

func formatSize(n uint64) string {
	switch {
	case n >= 1<<40 && n%(1<<40) == 0:
		return fmt.Sprintf("%dTiB", n>>40)
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatUint(n, 10)
}
