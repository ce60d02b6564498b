package client

import (
	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/transfer"
)

// replicaRequest is the one place a replica descriptor from the master
// becomes a transfer request: op on [off, off+len(buf)) of the replica (off
// counts from the replica's first byte), to its node's endpoint, with its
// data-plane grant and every transport the node offers for its segment
// (RDMA side channel, region base and rkey), so the engine can route it
// over the best transport both sides share. Sum is the caller's to set.
func replicaRequest(op transfer.Op, r *kvtierpb.Replica, off uint64, buf []byte) transfer.Request {
	return transfer.Request{
		Op: op, Endpoint: r.GetEndpoint(), Segment: r.GetSegment(), Bucket: r.GetBucket(),
		Offset: r.GetOffset() + off, Buf: buf, Grant: r.GetGrant(),
		Offer: transfer.SegmentOffer{RDMAAddr: r.GetRdmaAddr(), RDMABase: r.GetRdmaBase(), RDMAKey: r.GetRdmaRkey(),
			RDMAFreesBase: r.GetRdmaFreesBase(), RDMAFreesKey: r.GetRdmaFreesRkey()},
	}
}
