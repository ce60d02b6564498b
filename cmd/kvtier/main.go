// Command kvtier is the one binary of the kvtier tiered KV-cache appliance:
// servers (standalone, master, appliance), client verbs (put, get, exist,
// stat, ls, rm), tools (bench, replay, nvme). It is the only place that reads
// flags, config files and the environment.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/kverr"
)

func main() {
	root := newRoot()
	if err := root.Execute(); err != nil {
		var ex exitError
		if errors.As(err, &ex) {
			if ex.err != nil {
				fmt.Fprintln(os.Stderr, "kvtier:", ex.err)
			}
			os.Exit(ex.code)
		}
		fmt.Fprintln(os.Stderr, "kvtier:", describe(err))
		os.Exit(2)
	}
}

// exitError carries a specific exit status (exist: 1 when absent).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return fmt.Sprintf("exit %d: %v", e.code, e.err) }

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
	root.PersistentFlags().String("config", "", "YAML file with flag values (flag-name: value); command-line flags win")
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		return applyConfigFile(cmd)
	}
	root.AddCommand(
		newStandaloneCmd(), newMasterCmd(), newApplianceCmd(),
		newPutCmd(), newGetCmd(), newExistCmd(), newStatCmd(), newLsCmd(), newRmCmd(),
	)
	root.AddCommand(extraCommands()...)
	return root
}
