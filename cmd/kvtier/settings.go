package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Where a setting's value comes from. Precedence, highest first:
// command-line flag > KVTIER_* environment variable > --config file > default.
const (
	sourceFlag    = "flag"
	sourceEnv     = "env"
	sourceFile    = "file"
	sourceDefault = "default"
)

// envName is the environment variable that sets flag name: KVTIER_ and the
// name in capitals with dashes as underscores (--ssd-dir: KVTIER_SSD_DIR).
func envName(flag string) string {
	return "KVTIER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// sourceAnnotation records, on the flag itself, where its value came from
// (read back by `kvtier config print`).
const sourceAnnotation = "kvtier-source"

func setSource(f *pflag.Flag, src string) {
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[sourceAnnotation] = []string{src}
}

func sourceOf(f *pflag.Flag) string {
	if s := f.Annotations[sourceAnnotation]; len(s) == 1 {
		return s[0]
	}
	if f.Changed {
		return sourceFlag
	}
	return sourceDefault
}

// applySettings fills every flag not given on the command line, first from
// its KVTIER_* environment variable, then from the --config file. A bad value
// in either names where it came from.
func applySettings(cmd *cobra.Command) error {
	fs := cmd.Flags()
	// --config itself may come from KVTIER_CONFIG.
	if f := fs.Lookup("config"); f != nil && !f.Changed {
		if v, ok := os.LookupEnv(envName("config")); ok && v != "" {
			if err := fs.Set("config", v); err != nil {
				return usagef("%s: %v", envName("config"), err)
			}
			setSource(f, sourceEnv)
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil {
			return
		}
		if f.Changed {
			if len(f.Annotations[sourceAnnotation]) == 0 {
				setSource(f, sourceFlag)
			}
			return
		}
		if f.Name == "config" || f.Name == "help" || f.Name == "version" {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("%s=%q (for --%s): %v", envName(f.Name), v, f.Name, serr)
			return
		}
		setSource(f, sourceEnv)
	})
	if err != nil {
		return err
	}
	return applyConfigFile(cmd)
}

// secretFlag reports whether a flag's value must never be printed. The
// NVMe DH-HMAC-CHAP keys (--nvme-host-key, --nvme-ctrl-key) may hold the
// secret itself (HOSTNQN=DHHC-1:...).
func secretFlag(name string) bool {
	return strings.Contains(name, "token") && !strings.HasSuffix(name, "-file") ||
		strings.Contains(name, "password") || strings.Contains(name, "secret") ||
		strings.HasPrefix(name, "nvme-") && strings.HasSuffix(name, "-key")
}

// setting is one line of `kvtier config print`.
type setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
	Env    string `json:"env"`
}

// effectiveSettings lists every flag of cmd with its value and source,
// secrets masked.
func effectiveSettings(cmd *cobra.Command) []setting {
	var out []setting
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" || f.Name == "version" {
			return
		}
		v := f.Value.String()
		if secretFlag(f.Name) && v != "" {
			v = "********"
		}
		out = append(out, setting{Name: f.Name, Value: v, Source: sourceOf(f), Env: envName(f.Name)})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// serverCommands are the commands whose settings the example configuration
// documents and `config print` resolves.
// Each is built alone, with the root's persistent settings (log format and
// level, summary interval) of its own, as it sees them under the root.
func serverCommands() map[string]func() *cobra.Command {
	with := func(mk func() *cobra.Command) func() *cobra.Command {
		return func() *cobra.Command {
			c := mk()
			registerLogFlags(c)
			return c
		}
	}
	return map[string]func() *cobra.Command{
		"standalone": with(newStandaloneCmd), "master": with(newMasterCmd), "appliance": with(newApplianceCmd),
	}
}

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Configuration: print the effective settings of a server command",
	}
	var asJSON bool
	print := &cobra.Command{
		Use:   "print [standalone|master|appliance] [flags of that command...]",
		Short: "Print every setting of a server command with its value and source (flag, env, file, default), secrets masked",
		Long: `Resolves settings exactly as the server command would (flag > KVTIER_* environment >
--config file > default) and prints each with where it came from. Secrets (tokens) are masked.

  kvtier config print appliance --config /etc/kvtier/kvtier.yaml --dram 4GiB`,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			name := "standalone"
			rest := args
			if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
				name, rest = args[0], args[1:]
			}
			var kept []string
			for _, a := range rest {
				switch a {
				case "--json":
					asJSON = true
				case "-h", "--help":
					return usagef("usage: kvtier config print [standalone|master|appliance] [--json] [--config FILE] [flags...]")
				default:
					kept = append(kept, a)
				}
			}
			mk, ok := serverCommands()[name]
			if !ok {
				return usagef("config print %q: want standalone, master or appliance", name)
			}
			sc := mk()
			sc.Flags().String("config", "", "")
			if err := sc.ParseFlags(kept); err != nil {
				return usagef("config print %s: %v", name, err)
			}
			if err := applySettings(sc); err != nil {
				return err
			}
			list := effectiveSettings(sc)
			if asJSON {
				return printJSON(map[string]any{"command": name, "settings": list})
			}
			fmt.Printf("# kvtier %s: effective settings (precedence: flag > env > file > default)\n", name)
			for _, s := range list {
				fmt.Printf("%-24s %-40s %-8s %s\n", s.Name, quoteEmpty(s.Value), s.Source, s.Env)
			}
			return nil
		},
	}
	cmd.AddCommand(print)
	return cmd
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
