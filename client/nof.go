package client

import (
	"context"

	"kvtier/api/kvtierpb"
	"kvtier/internal/kverr"
)

// NOF replica I/O goes straight to the appliance's NVMe/TCP namespace through
// the initiator. Until a NOF dialer is configured, NOF replicas are reported
// as unreachable so reads fall back to the next replica.
func (c *Client) readNOF(ctx context.Context, r *kvtierpb.Replica, dst []byte) error {
	return kverr.New(kverr.TransferFail, "", "NOF replica on %s (%s ns %d): no NVMe/TCP initiator configured in this client", r.TargetAddr, r.Nqn, r.Nsid)
}

func (c *Client) writeNOF(ctx context.Context, rs []*kvtierpb.Replica, value []byte) error {
	return kverr.New(kverr.TransferFail, "", "%d NOF replicas allocated but no NVMe/TCP initiator configured in this client", len(rs))
}
