// Command kvtier is the one binary of the kvtier tiered KV-cache appliance:
// servers (standalone, master, appliance), client verbs (put, get, exist,
// stat, ls, rm), tools (bench, replay, nvme) and operator verbs (version,
// doctor, status, config print, appliance drain|undrain, tiers show|set). It
// is the only place that reads flags, config files and the environment, and
// the only place that picks an exit status (exitcodes.go).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/internal/buildinfo"
	"github.com/kvtier/kvtier/kverr"
)

func main() {
	root := newRoot()
	err := root.Execute()
	if err == nil {
		return
	}
	var ex exitError
	if errors.As(err, &ex) {
		if ex.err != nil {
			fmt.Fprintln(os.Stderr, "kvtier:", describe(ex.err))
		}
	} else {
		fmt.Fprintln(os.Stderr, "kvtier:", describe(err))
	}
	os.Exit(exitCode(err))
}

// describe prints a kvtier refusal as "CODE_NAME: reason".
func describe(err error) string {
	var e *kverr.Error
	if errors.As(err, &e) {
		return e.Error()
	}
	return err.Error()
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "kvtier",
		Short: "kvtier: a tiered KV-cache appliance (DRAM + SSD + NVMe-oF)",
		Long: `kvtier keeps LLM KV cache in hugepage DRAM and on SSD and serves it to GPU nodes,
which move the bytes directly (the master only decides where they go).

Start a working appliance on this machine:  kvtier standalone
Store and read an object:                   kvtier put KEY FILE ; kvtier get KEY -o FILE`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("config", "", "YAML file with flag values (flag-name: value); precedence: flag > KVTIER_* environment > this file > default")
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		return applySettings(cmd)
	}
	registerLogFlags(root)
	root.Version = buildinfo.Get().Version
	root.SetVersionTemplate(buildinfo.Get().String() + "\n")
	root.AddCommand(
		newStandaloneCmd(), newMasterCmd(), newApplianceCmdWithAdmin(),
		newPutCmd(), newGetCmd(), newExistCmd(), newStatCmd(), newLsCmd(), newRmCmd(),
	)
	root.AddCommand(extraCommands()...)
	root.AddCommand(operatorCommands()...)
	markUsageErrors(root)
	return root
}

// newApplianceCmdWithAdmin is `kvtier appliance` (the server) with the
// operator verbs `appliance drain NAME` and `appliance undrain NAME`.
func newApplianceCmdWithAdmin() *cobra.Command {
	c := newApplianceCmd()
	newApplianceAdminCmds(c)
	return c
}
