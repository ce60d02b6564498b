package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/doctor"
	"github.com/kvtier/kvtier/internal/buildinfo"
)

// operatorCommands are the verbs an operator runs on or against the box:
// version, doctor, status, config print, appliance drain|undrain (added to
// the appliance command), tiers show|set.
func operatorCommands() []*cobra.Command {
	return []*cobra.Command{newVersionCmd(), newDoctorCmd(), newStatusCmd(), newConfigCmd(), newTiersCmd()}
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version and build tags (also: kvtier --version)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			in := buildinfo.Get()
			if asJSON {
				return printJSON(in)
			}
			fmt.Println(in.String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	var cfg doctor.Config
	var dramSize, ssdCap sizeValue
	var rdmaDevice string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this host for what kvtier needs (hugepages, memlock, THP, O_DIRECT, free space, scheduler, NUMA, limits, clock, RDMA devices and transport, NVMe) and print what to fix",
		Long: `Checks this host and prints, for each item, what was found, what kvtier wants and the
command that fixes it. Exit status: 0 when no check failed (warnings allowed), 8 when one did.
Give the appliance's own settings (or its --config file) so the checks compare against them:

  kvtier doctor --config /etc/kvtier/kvtier.yaml
  kvtier doctor --ssd-dir /var/lib/kvtier/ssd --dram 64GiB --hugepages on --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch cfg.Hugepages {
			case "auto", "on", "off":
			default:
				return usagef("--hugepages %q: want auto, on or off", cfg.Hugepages)
			}
			cfg.DRAM, cfg.SSDCapacity = uint64(dramSize), uint64(ssdCap)
			cfg.RDMATransport = rdmaProbe(rdmaDevice)
			if !cmd.Flags().Changed("ssd-capacity") && cfg.SSDDir == "" {
				cfg.SSDCapacity = 0
			}
			r := doctor.Run(cmd.Context(), cfg)
			if asJSON {
				if err := printJSON(r); err != nil {
					return err
				}
			} else {
				printDoctor(r)
			}
			if !r.OK {
				return exitError{code: exitHostCheck}
			}
			return nil
		},
	}
	dramSize, ssdCap = 256<<20, 1<<30
	fs := cmd.Flags()
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	fs.StringVar(&cfg.SSDDir, "ssd-dir", "", "the appliance's SSD tier directory (O_DIRECT, free space and scheduler are checked there)")
	fs.Var(&dramSize, "dram", "the appliance's --dram (hugepages and memlock are compared with it)")
	fs.Var(&ssdCap, "ssd-capacity", "the appliance's --ssd-capacity (compared with the free space)")
	fs.StringVar(&cfg.Hugepages, "hugepages", "auto", "the appliance's --hugepages: auto | on | off")
	fs.StringVar(&rdmaDevice, "rdma-device", "auto", "the --rdma-device to probe: "+rdmaDeviceHelp)
	fs.StringVar(&cfg.Root, "root", "/", "read /proc and /sys under this directory (to check a prepared or mounted host tree)")
	return cmd
}

func printDoctor(r doctor.Report) {
	for _, c := range r.Checks {
		mark := map[doctor.Status]string{doctor.StatusOK: "ok  ", doctor.StatusWarn: "WARN", doctor.StatusFail: "FAIL", doctor.StatusSkip: "skip"}[c.Status]
		fmt.Printf("[%s] %-13s %s\n", mark, c.Name, c.Found)
		if c.Status == doctor.StatusWarn || c.Status == doctor.StatusFail {
			if c.Want != "" {
				fmt.Printf("       want: %s\n", c.Want)
			}
			if c.Fix != "" {
				fmt.Printf("       fix:  %s\n", c.Fix)
			}
		}
	}
	verdict := "ok"
	if !r.OK {
		verdict = "NOT READY"
	}
	fmt.Printf("\n%s: %d failed, %d warnings, %d checks\n", verdict, r.Failed, r.Warned, len(r.Checks))
}

// doctorFor returns the host checks of a running server for its REST
// system/doctor endpoint, with the appliance's own settings.
func doctorFor(af *applianceFlags) func(ctx context.Context) doctor.Report {
	return func(ctx context.Context) doctor.Report {
		cfg := doctor.Config{}
		if af != nil {
			cfg.SSDDir, cfg.SSDCapacity, cfg.DRAM = af.ssdDir, uint64(af.ssdCapacity), uint64(af.dramSize)
			cfg.Hugepages = strings.ToLower(af.hugepages)
			cfg.RDMATransport = rdmaProbe(af.rdmaDevice)
		}
		return doctor.Run(ctx, cfg)
	}
}
