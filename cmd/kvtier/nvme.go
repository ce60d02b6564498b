package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"

	"kvtier/appliance"
)

type nvmeFlags struct {
	addr       string
	namespaces []string
}

func (f *nvmeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "nvme-addr", "", "built-in NVMe/TCP target listen address (off unless given)")
	cmd.Flags().StringArrayVar(&f.namespaces, "nvme-namespace", nil, "NVMe namespace backing file PATH[:SIZE] (repeatable; created at SIZE if missing)")
}

type runningNVMe struct{ addr string }

func (n *runningNVMe) describe() string {
	if n == nil || n.addr == "" {
		return ""
	}
	return " nvme=" + n.addr
}

func (n *runningNVMe) stop() {}

func startNVMe(ctx context.Context, f *nvmeFlags, a *appliance.Appliance, log *slog.Logger) (*runningNVMe, error) {
	return &runningNVMe{}, nil
}

func extraCommands() []*cobra.Command { return nil }
