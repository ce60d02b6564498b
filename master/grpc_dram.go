package master

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// Fence makes the master refuse mutations (NOT_LEADER) from now on: its
// leadership ended (HA), and another master may already be acknowledging
// puts. It cannot be undone; the process restarts as a standby.
func (m *Master) Fence() { m.fenced.Store(true) }

func (m *Master) fenceErr() error {
	if m.fenced.Load() {
		return kverr.New(kverr.NotLeader, "", "this master lost its leadership (epoch %d): ask the new leader", m.cfg.LeaderEpoch)
	}
	return nil
}

func (s *grpcServer) TakeDramRecords(r *kvtierpb.TakeDramRecordsRequest, stream grpc.ServerStreamingServer[kvtierpb.TakeDramRecordsResponse]) error {
	outbox, reset, rs, err := s.m.TakeDramRecords(stream.Context(), r.GetClientId(), r.GetOutbox(), r.GetAckThrough(), time.Duration(r.GetWaitMs())*time.Millisecond)
	if err != nil {
		return toGRPC(err)
	}
	out := &kvtierpb.TakeDramRecordsResponse{Outbox: outbox, Reset_: reset, Records: make([]*kvtierpb.DramRecord, len(rs))}
	for i, d := range rs {
		out.Records[i] = &kvtierpb.DramRecord{Seq: d.Seq, Free: d.Free, Tenant: d.Tenant, Key: []byte(d.Key), Segment: d.Segment,
			Offset: d.Offset, Size: d.Size, Crc32C: d.CRC32C, HasChecksum: d.HasChecksum, Version: d.Version}
	}
	// A lost answer is handed out again: records stay until acknowledged.
	return stream.Send(out)
}

func (s *grpcServer) RegisterDramObjects(ctx context.Context, r *kvtierpb.RegisterDramObjectsRequest) (*kvtierpb.BatchResponse, error) {
	if err := s.m.fenceErr(); err != nil {
		return nil, toGRPC(err)
	}
	objs := make([]DramObject, len(r.GetObjects()))
	for i, o := range r.GetObjects() {
		objs[i] = DramObject{Tenant: o.GetTenant(), Key: string(o.GetKey()), Segment: o.GetSegment(), Offset: o.GetOffset(),
			Size: o.GetSize(), CRC32C: o.GetCrc32C(), HasChecksum: o.GetHasChecksum(), Version: o.GetVersion()}
	}
	res, err := s.m.RegisterDramObjects(ctx, r.GetClientId(), r.GetIncarnation(), objs, r.GetLast())
	if err != nil {
		return nil, toGRPC(err)
	}
	return keyResults(res), nil
}
