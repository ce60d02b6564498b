package initiator

import (
	"context"
	"encoding/binary"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
)

// DiscoveryEntry is one subsystem a discovery controller advertises.
type DiscoveryEntry = nvme.DiscoveryEntry

// Discover connects to the discovery controller at addr and returns its
// discovery log entries, re-reading while GENCTR changes underneath.
func Discover(ctx context.Context, addr, hostNQN string) ([]DiscoveryEntry, error) {
	c, err := Dial(ctx, addr, Config{SubNQN: nvme.DiscoveryNQN, HostNQN: hostNQN, KeepAlive: -1})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.DiscoveryLog(ctx)
}

func logCmd(lid uint8, off uint64, n int) pdu.Command {
	numd := uint32(n/4 - 1)
	return pdu.Command{Opcode: nvme.AdminGetLogPage, CDW10: uint32(lid) | numd<<16, CDW11: numd >> 16, CDW12: uint32(off), CDW13: uint32(off >> 32)}
}

// DiscoveryLog reads the discovery log page (discovery controllers only).
func (c *Controller) DiscoveryLog(ctx context.Context) ([]DiscoveryEntry, error) {
	for attempt := 0; attempt < 5; attempt++ {
		hdr := make([]byte, nvme.DiscoveryHeaderLen)
		if _, err := c.AdminCommand(ctx, logCmd(nvme.LogDiscovery, 0, len(hdr)), hdr); err != nil {
			return nil, err
		}
		numrec := binary.LittleEndian.Uint64(hdr[8:])
		if numrec > 1024 {
			return nil, kverr.New(kverr.TransferFail, c.addr, "discovery log claims %d records", numrec)
		}
		full := make([]byte, nvme.DiscoveryHeaderLen+int(numrec)*nvme.DiscoveryEntryLen)
		if _, err := c.AdminCommand(ctx, logCmd(nvme.LogDiscovery, 0, len(full)), full); err != nil {
			return nil, err
		}
		gen, _, entries, err := nvme.ParseDiscoveryLog(full)
		if err != nil {
			return nil, kverr.New(kverr.TransferFail, c.addr, "%v", err)
		}
		check := make([]byte, 8)
		if _, err := c.AdminCommand(ctx, logCmd(nvme.LogDiscovery, 0, 8), check); err != nil {
			return nil, err
		}
		if binary.LittleEndian.Uint64(check) == gen {
			return entries, nil
		}
	}
	return nil, kverr.New(kverr.TransferFail, c.addr, "discovery log kept changing")
}
