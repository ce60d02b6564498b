package main

import "github.com/kvtier/kvtier/internal/transfer"

// rdmaDeviceHelp is the one help text of --rdma-device (appliance,
// standalone, client verbs, bench).
const rdmaDeviceHelp = "RDMA device for one-sided transfers (a binary built with -tags rdma): auto = the first device libibverbs lists, off = never, or a device name; " +
	"without a usable device RDMA is off, the reason logged and shown by kvtier doctor"

// rdmaProbe returns doctor's RDMA transport probe for device: a transfer
// engine made with that setting says whether it would use RDMA, and why
// not (cmd asks the engine: doctor imports no mechanism).
func rdmaProbe(device string) func() (bool, string) {
	return func() (bool, string) {
		e, err := transfer.New(transfer.Config{RDMADevice: device})
		if err != nil {
			return false, err.Error()
		}
		defer e.Close()
		return e.RDMAStatus()
	}
}
