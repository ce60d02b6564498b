package master

import (
	"bytes"
	"context"
	"hash/maphash"
	"io"
	"math"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// grpcServer translates the wire contract to Master calls. It holds no
// state of its own but memos of grant sessions and put tickets; every refusal leaves as
// kverr.ToGRPC.
type grpcServer struct {
	kvtierpb.UnimplementedMasterServer
	m *Master
	// sessions memoizes grantSession's digest (a SHA-256, ~0.5 µs) for
	// recent callers: every put and get signs grants for its caller's
	// session. A slot per hash of the caller; a miss recomputes.
	sessions [sessionSlots]atomic.Pointer[sessionMemo]
	// tickets memoizes verified put tickets (directput.go).
	tickets [ticketSlots]atomic.Pointer[ticketMemo]
}

const sessionSlots = 16

// sessionMemo is one caller's session: of a principal (credentials) or of
// a client ID (open mode), the two domains grantSession keeps apart.
type sessionMemo struct {
	principal bool
	id        string
	s         grant.Session
}

var sessionSeed = maphash.MakeSeed()

var _ kvtierpb.MasterServer = (*grpcServer)(nil)

// NewGRPCServer returns the gRPC face of m, for kvtierpb.RegisterMasterServer.
func NewGRPCServer(m *Master) kvtierpb.MasterServer { return &grpcServer{m: m} }

// toGRPC maps a refusal to a gRPC status (kverr carries binary keys safely).
func toGRPC(err error) error { return kverr.ToGRPC(err) }

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func msDur(v uint64) time.Duration {
	if v > math.MaxInt64/uint64(time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(v) * time.Millisecond
}

func replicaToPB(r Replica) *kvtierpb.Replica {
	p := new(kvtierpb.Replica)
	fillReplicaPB(p, r)
	return p
}

// fillReplicaPB sets the fields of a zero p from r (batch answers allocate
// their replicas together).
// replicaSlab hands out the replica messages of one batch answer, all
// allocated together.
type replicaSlab struct {
	reps []kvtierpb.Replica
	ptrs []*kvtierpb.Replica
}

func newReplicaSlab(n int) replicaSlab {
	return replicaSlab{reps: make([]kvtierpb.Replica, n), ptrs: make([]*kvtierpb.Replica, n)}
}

// take fills the next len(rs) messages from rs and returns them.
func (s *replicaSlab) take(rs []Replica) []*kvtierpb.Replica {
	k := len(rs)
	out := s.ptrs[:k:k]
	for j, r := range rs {
		fillReplicaPB(&s.reps[j], r)
		out[j] = &s.reps[j]
	}
	s.reps, s.ptrs = s.reps[k:], s.ptrs[k:]
	return out
}

func fillReplicaPB(p *kvtierpb.Replica, r Replica) {
	p.Type, p.State, p.Segment = kvtierpb.ReplicaType(r.Type), kvtierpb.ReplicaState(r.State), r.Segment
	p.Node, p.Endpoint, p.Offset, p.Length, p.Bucket = r.Node, r.Endpoint, r.Offset, r.Length, r.Bucket
	p.Nqn, p.Nsid, p.TargetAddr, p.Unavailable = r.NQN, r.NSID, r.TargetAddr, r.Unavailable
	p.RdmaAddr, p.RdmaBase, p.RdmaRkey = r.Offer.RDMAAddr, r.Offer.RDMABase, r.Offer.RDMAKey
	p.RdmaFreesBase, p.RdmaFreesRkey = r.Offer.RDMAFreesBase, r.Offer.RDMAFreesKey
}

func replicasToPB(rs []Replica) []*kvtierpb.Replica {
	out := make([]*kvtierpb.Replica, len(rs))
	for i, r := range rs {
		out[i] = replicaToPB(r)
	}
	return out
}

func putFromPB(p *kvtierpb.PutStartRequest) PutRequest {
	c := p.GetConfig()
	pc := PutConfig{
		Replicas: int(c.GetReplicaNum()), NOFReplicas: int(c.GetNofReplicaNum()),
		PreferredSegment: c.GetPreferredSegment(), SoftPin: c.GetSoftPin(), HardPin: c.GetHardPin(),
		SoftPinTTL: msDur(c.GetSoftPinTtlMs()), OnlyNode: c.GetOnlyNode(), HolderPulls: c.GetHolderPulls() && c.GetOnlyNode() != "",
	}
	pc.Stage = c.GetStage() // honoured for direct puts only: the caller clears it for others
	if pc.Replicas == 0 && pc.NOFReplicas == 0 {
		pc.Replicas = 1 // wire: replica_num 0 means 1
	}
	return PutRequest{Client: p.GetClientId(), Tenant: p.GetTenant(), Key: string(p.GetKey()), Size: p.GetSize(),
		CRC32C: p.GetCrc32C(), HasChecksum: p.GetHasChecksum(), Config: pc}
}

func keyResult(err error) *kvtierpb.KeyResult {
	if err == nil {
		return &kvtierpb.KeyResult{}
	}
	return &kvtierpb.KeyResult{Code: kvtierpb.ErrorCode(kverr.CodeOf(err)), Message: err.Error()}
}

func keyResults(errs []error) *kvtierpb.BatchResponse {
	out := &kvtierpb.BatchResponse{Results: make([]*kvtierpb.KeyResult, len(errs))}
	slab := make([]kvtierpb.KeyResult, len(errs)) // one allocation, not one per key
	for i, e := range errs {
		if e != nil {
			slab[i].Code, slab[i].Message = kvtierpb.ErrorCode(kverr.CodeOf(e)), e.Error()
		}
		out.Results[i] = &slab[i]
	}
	return out
}

func keysOf(b [][]byte) []string {
	out := make([]string, len(b))
	for i, k := range b {
		out[i] = string(k)
	}
	return out
}

func listToPB(l ReplicaList) *kvtierpb.GetReplicaListResponse {
	return &kvtierpb.GetReplicaListResponse{Size: l.Size, Crc32C: l.CRC32C, HasChecksum: l.HasChecksum,
		LeaseDeadlineMs: ms(l.LeaseDeadline), Replicas: replicasToPB(l.Replicas)}
}

// grantSession is the client session data-plane grants are bound to, the
// one place that says who a grant is for. With credentials it is the
// call's authenticated principal (auth.FromContext), so a grant names the
// credential it was issued to; open (no principal) it is the client ID the
// call names.
func grantSession(ctx context.Context, clientID string) grant.Session {
	if p, ok := auth.FromContext(ctx); ok {
		return grant.SessionOfPrincipal(p.ID)
	}
	return grant.SessionOf(clientID)
}

// session is grantSession, memoized per caller.
func (s *grpcServer) session(ctx context.Context, clientID string) grant.Session {
	principal, id := false, clientID
	if p, ok := auth.FromContext(ctx); ok {
		principal, id = true, p.ID
	}
	slot := &s.sessions[maphash.String(sessionSeed, id)%sessionSlots]
	if m := slot.Load(); m != nil && m.principal == principal && m.id == id {
		return m.s
	}
	g := grantSession(ctx, clientID)
	slot.Store(&sessionMemo{principal: principal, id: id, s: g})
	return g
}

// nodeGrantSession is grantSession for a grant signed outside the node's
// call (an offload task's source, handed out by TakeOffload's stream): the
// principal bound to the node's client ID, if any. Not on the put/get path:
// Session takes the sessions lock.
func (m *Master) nodeGrantSession(node string) grant.Session {
	if p, ok := m.Session(node); ok {
		return grant.SessionOfPrincipal(p.ID)
	}
	return grant.SessionOf(node)
}

// signWrites attaches to each replica of a put its write grant: exactly
// the extent allocated, until the put may be taken over by another writer
// (PutDiscardTimeout).
func (s *grpcServer) signWrites(sess grant.Session, exp time.Time, reps []Replica, out []*kvtierpb.Replica) {
	for i := range reps {
		out[i].Grant = s.m.SignGrant(reps[i], sess, grant.Write, exp)
	}
}

// writeExpiry is when the write grants of a put signed now end.
func (s *grpcServer) writeExpiry() time.Time { return s.m.now().Add(s.m.cfg.PutDiscardTimeout) }

// signReads attaches to each replica of a read its read grant, until the
// read lease ends.
func (s *grpcServer) signReads(sess grant.Session, l ReplicaList, out *kvtierpb.GetReplicaListResponse) {
	exp := l.LeaseDeadline
	if exp.IsZero() {
		exp = s.m.now().Add(s.m.cfg.LeaseTTL)
	}
	for i := range l.Replicas {
		out.Replicas[i].Grant = s.m.SignGrant(l.Replicas[i], sess, grant.Read, exp)
	}
}

func (s *grpcServer) PutStart(ctx context.Context, r *kvtierpb.PutStartRequest) (*kvtierpb.PutStartResponse, error) {
	if err := s.m.fenceErr(); err != nil { // deposed: another master may lead
		return nil, toGRPC(err)
	}
	req := putFromPB(r)
	if tok := r.GetPutTicket(); len(tok) > 0 { // a direct put, placed on the node that has the bytes
		node, err := s.checkTicket(ctx, tok, r.GetTenant(), r.GetClientId())
		if err != nil {
			return nil, toGRPC(err)
		}
		req.Config.OnlyNode = node
	} else {
		req.Config.Stage = 0 // only the node that holds the bytes stages them
	}
	reps, err := s.m.PutStart(ctx, req)
	if err != nil {
		return nil, toGRPC(err)
	}
	out := &kvtierpb.PutStartResponse{Replicas: replicasToPB(reps), Committed: stagedCommitted(&req, reps)}
	if out.Committed {
		if err := s.m.fenceErr(); err != nil { // deposed meanwhile: do not acknowledge
			return nil, toGRPC(err)
		}
	}
	if len(r.GetPutTicket()) == 0 { // the node writes its own memory: no grant
		s.signWrites(s.session(ctx, r.GetClientId()), s.writeExpiry(), reps, out.Replicas)
	} else {
		out.DramOutbox, out.DramSeq = s.m.commitMark(req.Client, req.Tenant, req.Key)
		out.DramFreeSeq = lastFreeSeq(reps)
		if r.GetConfig().GetHolderTakes() && out.DramSeq != 0 {
			out.DramRecords = dramRecordsToPB(s.m.holderRecords(req.Config.OnlyNode, out.DramSeq))
		}
	}
	return out, nil
}

// stagedCommitted reports whether PutStart committed a staged put at once
// (PutConfig.Stage): its one replica is COMPLETE already. A master that
// could not (its node keeps no DRAM directory here, so no record would
// carry the stage) left it in flight, for a PutEnd.
func stagedCommitted(req *PutRequest, reps []Replica) bool {
	return req.Config.Stage != 0 && len(reps) == 1 && reps[0].State == Complete
}

// holderRecordsPB gives the result with the highest dram_seq among those
// whose request asked for records (holder_takes) the records of its node
// up to that seq (Master.holderRecords): one copy for a batch of direct
// puts, which one node sends.
func (s *grpcServer) holderRecordsPB(items []*kvtierpb.PutStartRequest, reqs []PutRequest, results []*kvtierpb.PutStartResult) {
	best := -1
	for i, g := range results {
		if g.DramSeq != 0 && items[i].GetConfig().GetHolderTakes() && (best < 0 || g.DramSeq > results[best].DramSeq) {
			best = i
		}
	}
	if best >= 0 {
		results[best].DramRecords = dramRecordsToPB(s.m.holderRecords(reqs[best].Config.OnlyNode, results[best].DramSeq))
	}
}

// dramRecordsToPB converts records for one message (nil: none).
func dramRecordsToPB(rs []DramRecord) []*kvtierpb.DramRecord {
	if len(rs) == 0 {
		return nil
	}
	var out kvtierpb.TakeDramRecordsResponse
	var recs []kvtierpb.DramRecord
	var keys []byte
	dramRecordsPB(&out, &recs, &keys, 0, false, rs)
	return out.Records
}

func (s *grpcServer) PutEnd(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	if err := s.m.fenceErr(); err != nil {
		return nil, toGRPC(err)
	}
	holder, err := s.endHolder(ctx, r.GetPutTicket(), r.GetTenant(), r.GetClientId(), r.GetHolderApplies())
	if err != nil {
		return nil, toGRPC(err)
	}
	err = s.m.putEndExcept(ctx, r.GetClientId(), r.GetTenant(), string(r.GetKey()), holder, endSum(r))
	if err == nil {
		err = s.m.fenceErr() // deposed while waiting: do not acknowledge
	}
	return &kvtierpb.Empty{LeaderEpoch: s.m.cfg.LeaderEpoch}, toGRPC(err)
}

// endSum is the checksum a PutEnd carries (kvtierpb.KeyRequest.crc32c).
func endSum(r *kvtierpb.KeyRequest) endChecksum {
	return endChecksum{crc: r.GetCrc32C(), has: r.GetHasChecksum()}
}

func (s *grpcServer) PutRevoke(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	if tok := r.GetPutTicket(); len(tok) > 0 {
		if _, err := s.checkTicket(ctx, tok, r.GetTenant(), r.GetClientId()); err != nil {
			return nil, toGRPC(err)
		}
	}
	return &kvtierpb.Empty{}, toGRPC(s.m.PutRevoke(ctx, r.GetClientId(), r.GetTenant(), string(r.GetKey())))
}

func (s *grpcServer) GetReplicaList(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.GetReplicaListResponse, error) {
	l, err := s.m.GetReplicaList(ctx, r.GetClientId(), r.GetTenant(), string(r.GetKey()))
	if err != nil {
		return nil, toGRPC(err)
	}
	out := listToPB(l)
	s.signReads(s.session(ctx, r.GetClientId()), l, out)
	return out, nil
}

func (s *grpcServer) Exist(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.ExistResponse, error) {
	ok, err := s.m.Exist(ctx, r.GetTenant(), string(r.GetKey()))
	if err != nil {
		return nil, toGRPC(err)
	}
	return &kvtierpb.ExistResponse{Exists: ok}, nil
}

func (s *grpcServer) Remove(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	if err := s.m.fenceErr(); err != nil { // deposed: another master may lead
		return nil, toGRPC(err)
	}
	return &kvtierpb.Empty{}, toGRPC(s.m.Remove(ctx, r.GetTenant(), string(r.GetKey()), r.GetForce()))
}

func (s *grpcServer) RemoveByRegex(ctx context.Context, r *kvtierpb.RemoveByRegexRequest) (*kvtierpb.CountResponse, error) {
	if err := s.m.fenceErr(); err != nil { // deposed: another master may lead
		return nil, toGRPC(err)
	}
	n, err := s.m.RemoveByRegex(ctx, r.GetTenant(), r.GetRegex(), r.GetForce())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &kvtierpb.CountResponse{Count: uint64(n)}, nil
}

func (s *grpcServer) RemoveAll(ctx context.Context, r *kvtierpb.RemoveAllRequest) (*kvtierpb.CountResponse, error) {
	if err := s.m.fenceErr(); err != nil { // deposed: another master may lead
		return nil, toGRPC(err)
	}
	n, err := s.m.RemoveAll(ctx, r.GetTenant(), r.GetForce())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &kvtierpb.CountResponse{Count: uint64(n)}, nil
}

func (s *grpcServer) BatchPutStart(ctx context.Context, r *kvtierpb.BatchPutStartRequest) (*kvtierpb.BatchPutStartResponse, error) {
	if err := s.m.fenceErr(); err != nil { // deposed: another master may lead
		return nil, toGRPC(err)
	}
	if r.GetPerItemTickets() { // direct puts of many clients, coalesced by their box
		return s.batchPutStartItems(ctx, r)
	}
	var node string
	if tok := r.GetPutTicket(); len(tok) > 0 { // a direct batch put (see PutStart)
		var err error
		if node, err = s.checkTicket(ctx, tok, r.GetTenant(), r.GetClientId()); err != nil {
			return nil, toGRPC(err)
		}
	}
	reqs := make([]PutRequest, len(r.GetItems()))
	for i, it := range r.GetItems() {
		reqs[i] = putFromPB(it)
		if node != "" {
			reqs[i].Config.OnlyNode = node
		} else {
			reqs[i].Config.Stage = 0 // only the node that holds the bytes stages them
		}
	}
	res := s.m.BatchPutStart(ctx, r.GetClientId(), r.GetTenant(), reqs)
	// One session and expiry for the batch, and its messages allocated
	// together: per key, only what differs.
	sess, exp := s.session(ctx, r.GetClientId()), s.writeExpiry()
	n := 0
	for _, x := range res {
		n += len(x.Replicas)
	}
	slab := make([]kvtierpb.PutStartResult, len(res))
	rs := newReplicaSlab(n)
	out := &kvtierpb.BatchPutStartResponse{Results: make([]*kvtierpb.PutStartResult, len(res))}
	for i, x := range res {
		g := &slab[i]
		if x.Err != nil {
			g.Code, g.Message = kvtierpb.ErrorCode(kverr.CodeOf(x.Err)), x.Err.Error()
		}
		g.Replicas = rs.take(x.Replicas)
		if node == "" {
			s.signWrites(sess, exp, x.Replicas, g.Replicas)
		} else if x.Err == nil {
			g.DramOutbox, g.DramSeq = s.m.commitMark(r.GetClientId(), r.GetTenant(), reqs[i].Key)
			g.DramFreeSeq = lastFreeSeq(x.Replicas)
			g.Committed = stagedCommitted(&reqs[i], x.Replicas)
		}
		out.Results[i] = g
	}
	if err := s.m.fenceErr(); err != nil && node != "" { // deposed meanwhile: acknowledge no staged commit
		return nil, toGRPC(err)
	}
	if node != "" {
		s.holderRecordsPB(r.GetItems(), reqs, out.Results)
	}
	return out, nil
}

// endHolder checks a PutEnd's put ticket (none: a classic put) and returns
// the node whose commit record PutEnd need not wait for: the ticket's node
// when it said it applies the record itself (holder_applies), else "".
func (s *grpcServer) endHolder(ctx context.Context, tok []byte, tenant, client string, applies bool) (string, error) {
	if len(tok) == 0 {
		return "", nil
	}
	node, err := s.checkTicket(ctx, tok, tenant, client)
	if err != nil || !applies {
		return "", err
	}
	return node, nil
}

func (s *grpcServer) BatchPutEnd(ctx context.Context, r *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error) {
	if err := s.m.fenceErr(); err != nil {
		return nil, toGRPC(err)
	}
	var out *kvtierpb.BatchResponse
	if items := r.GetItems(); len(items) > 0 { // direct puts of many clients, coalesced by their box
		if len(r.GetKeys()) > 0 || r.GetClientId() != "" || len(r.GetPutTicket()) > 0 {
			return nil, toGRPC(kverr.New(kverr.InvalidParams, "", "BatchPutEnd: items and keys (or a batch identity) together"))
		}
		out = keyResults(s.batchPutEndItems(ctx, items))
	} else {
		holder, err := s.endHolder(ctx, r.GetPutTicket(), r.GetTenant(), r.GetClientId(), r.GetHolderApplies())
		if err != nil {
			return nil, toGRPC(err)
		}
		out = keyResults(s.m.batchPutEndExcept(ctx, r.GetClientId(), r.GetTenant(), keysOf(r.GetKeys()), holder))
	}
	if err := s.m.fenceErr(); err != nil {
		return nil, toGRPC(err)
	}
	out.LeaderEpoch = s.m.cfg.LeaderEpoch
	return out, nil
}

func (s *grpcServer) BatchPutRevoke(ctx context.Context, r *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error) {
	if tok := r.GetPutTicket(); len(tok) > 0 {
		if _, err := s.checkTicket(ctx, tok, r.GetTenant(), r.GetClientId()); err != nil {
			return nil, toGRPC(err)
		}
	}
	return keyResults(s.m.BatchPutRevoke(ctx, r.GetClientId(), r.GetTenant(), keysOf(r.GetKeys()))), nil
}

func (s *grpcServer) BatchGetReplicaList(ctx context.Context, r *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchGetReplicaListResponse, error) {
	res := s.m.BatchGetReplicaList(ctx, r.GetClientId(), r.GetTenant(), keysOf(r.GetKeys()))
	sess := s.session(ctx, r.GetClientId())
	n := 0
	for _, x := range res {
		n += len(x.List.Replicas)
	}
	slab := make([]kvtierpb.GetReplicaListResult, len(res))
	lists := make([]kvtierpb.GetReplicaListResponse, len(res))
	rs := newReplicaSlab(n)
	out := &kvtierpb.BatchGetReplicaListResponse{Results: make([]*kvtierpb.GetReplicaListResult, len(res))}
	for i, x := range res {
		g := &slab[i]
		if x.Err != nil {
			g.Code, g.Message = kvtierpb.ErrorCode(kverr.CodeOf(x.Err)), x.Err.Error()
		} else {
			l, v := x.List, &lists[i]
			v.Size, v.Crc32C, v.HasChecksum, v.LeaseDeadlineMs = l.Size, l.CRC32C, l.HasChecksum, ms(l.LeaseDeadline)
			v.Replicas = rs.take(l.Replicas)
			g.Value = v
			s.signReads(sess, l, v)
		}
		out.Results[i] = g
	}
	return out, nil
}

func (s *grpcServer) BatchExist(ctx context.Context, r *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchExistResponse, error) {
	ok, errs := s.m.BatchExist(ctx, r.GetTenant(), keysOf(r.GetKeys()))
	return &kvtierpb.BatchExistResponse{Results: keyResults(errs).Results, Exists: ok}, nil
}

func (s *grpcServer) BatchRemove(ctx context.Context, r *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error) {
	if err := s.m.fenceErr(); err != nil { // deposed: another master may lead
		return nil, toGRPC(err)
	}
	return keyResults(s.m.BatchRemove(ctx, r.GetTenant(), keysOf(r.GetKeys()), r.GetForce())), nil
}

func segmentFromPB(p *kvtierpb.Segment) Segment {
	return Segment{Name: p.GetName(), Type: ReplicaType(p.GetType()), Node: p.GetNode(), Endpoint: p.GetEndpoint(),
		Base: p.GetBase(), Size: p.GetSize(), NQN: p.GetNqn(), NSID: p.GetNsid(), TargetAddr: p.GetTargetAddr(),
		BlockSize: p.GetBlockSize(),
		Offer: TransportOffer{RDMAAddr: p.GetRdmaAddr(), RDMABase: p.GetRdmaBase(), RDMAKey: p.GetRdmaRkey(),
			RDMAFreesBase: p.GetRdmaFreesBase(), RDMAFreesKey: p.GetRdmaFreesRkey()},
		DirectPut: p.GetDirectPut(), DirectPutLocal: p.GetDirectPutLocal()}
}

func segmentToPB(s Segment) *kvtierpb.Segment {
	return &kvtierpb.Segment{Name: s.Name, Type: kvtierpb.ReplicaType(s.Type), Node: s.Node, Endpoint: s.Endpoint,
		Base: s.Base, Size: s.Size, Nqn: s.NQN, Nsid: s.NSID, TargetAddr: s.TargetAddr, BlockSize: s.BlockSize,
		RdmaAddr: s.Offer.RDMAAddr, RdmaBase: s.Offer.RDMABase, RdmaRkey: s.Offer.RDMAKey,
		RdmaFreesBase: s.Offer.RDMAFreesBase, RdmaFreesRkey: s.Offer.RDMAFreesKey, DirectPut: s.DirectPut,
		DirectPutLocal: s.DirectPutLocal}
}

func (s *grpcServer) MountSegment(ctx context.Context, r *kvtierpb.MountSegmentRequest) (*kvtierpb.Empty, error) {
	if r.GetSegment() == nil {
		return nil, toGRPC(kverr.New(kverr.InvalidParams, "", "mount: no segment"))
	}
	id := Identity{Incarnation: r.GetIncarnation(), DiskID: r.GetDiskId()}
	if err := s.m.MountSegmentAs(ctx, r.GetClientId(), id, segmentFromPB(r.GetSegment())); err != nil {
		return nil, toGRPC(err)
	}
	s.m.EnsureGrantKeys(r.GetClientId(), r.GetIncarnation()) // signed from the first put; handed over in the next beat's answer
	return &kvtierpb.Empty{}, nil
}

func (s *grpcServer) UnmountSegment(ctx context.Context, r *kvtierpb.UnmountSegmentRequest) (*kvtierpb.Empty, error) {
	g := time.Duration(r.GetGraceMs()) * time.Millisecond
	if r.GetGraceMs() > math.MaxInt64/int64(time.Millisecond) {
		g = time.Duration(math.MaxInt64)
	}
	return &kvtierpb.Empty{}, toGRPC(s.m.UnmountSegmentAs(ctx, r.GetClientId(), r.GetIncarnation(), r.GetName(), g))
}

func diskFromPB(d *kvtierpb.DiskTierStats) DiskStats {
	return DiskStats{Capacity: d.GetCapacity(), Used: d.GetUsed(), Buckets: d.GetBuckets(), Objects: d.GetObjects(),
		OffloadQueue: d.GetOffloadQueue(), EvictedBuckets: d.GetEvictedBuckets(), BytesWritten: d.GetBytesWritten(),
		BytesRead: d.GetBytesRead(), QuarantinedBuckets: d.GetQuarantinedBuckets(), IndexLoaded: d.GetIndexLoaded(),
		OffloadSkipped: d.GetOffloadSkipped(), OffloadFailed: d.GetOffloadFailed()}
}

func diskToPB(d DiskStats) *kvtierpb.DiskTierStats {
	return &kvtierpb.DiskTierStats{Capacity: d.Capacity, Used: d.Used, Buckets: d.Buckets, Objects: d.Objects,
		OffloadQueue: d.OffloadQueue, EvictedBuckets: d.EvictedBuckets, BytesWritten: d.BytesWritten,
		BytesRead: d.BytesRead, QuarantinedBuckets: d.QuarantinedBuckets, IndexLoaded: d.IndexLoaded,
		OffloadSkipped: d.OffloadSkipped, OffloadFailed: d.OffloadFailed}
}

func nvmeFromPB(n *kvtierpb.NvmeStats) *NVMeStats {
	if n == nil {
		return nil
	}
	out := &NVMeStats{Addr: n.GetAddr(), AuthSucceeded: n.GetAuthSucceeded(), AuthFailed: n.GetAuthFailed(), AuthRefused: n.GetAuthRefused()}
	for _, sub := range n.GetSubsystems() {
		s := NVMeSubsystem{NQN: sub.GetNqn()}
		for _, ns := range sub.GetNamespaces() {
			s.Namespaces = append(s.Namespaces, NVMeNamespace{NSID: ns.GetNsid(), Size: ns.GetSize(), BlockSize: ns.GetBlockSize(),
				ReadOps: ns.GetReadOps(), ReadBytes: ns.GetReadBytes(), WriteOps: ns.GetWriteOps(), WriteBytes: ns.GetWriteBytes(),
				OtherOps: ns.GetOtherOps(), Errors: ns.GetErrors()})
		}
		out.Subsystems = append(out.Subsystems, s)
	}
	for _, h := range n.GetHosts() {
		out.Hosts = append(out.Hosts, NVMeHost{CNTLID: h.GetCntlid(), HostNQN: h.GetHostNqn(), SubNQN: h.GetSubNqn(),
			RemoteAddr: h.GetRemoteAddr(), IOQueues: h.GetIoQueues()})
	}
	return out
}

func nvmeToPB(n *NVMeStats) *kvtierpb.NvmeStats {
	if n == nil {
		return nil
	}
	out := &kvtierpb.NvmeStats{Addr: n.Addr, AuthSucceeded: n.AuthSucceeded, AuthFailed: n.AuthFailed, AuthRefused: n.AuthRefused}
	for _, sub := range n.Subsystems {
		s := &kvtierpb.NvmeSubsystem{Nqn: sub.NQN}
		for _, ns := range sub.Namespaces {
			s.Namespaces = append(s.Namespaces, &kvtierpb.NvmeNamespace{Nsid: ns.NSID, Size: ns.Size, BlockSize: ns.BlockSize,
				ReadOps: ns.ReadOps, ReadBytes: ns.ReadBytes, WriteOps: ns.WriteOps, WriteBytes: ns.WriteBytes,
				OtherOps: ns.OtherOps, Errors: ns.Errors})
		}
		out.Subsystems = append(out.Subsystems, s)
	}
	for _, h := range n.Hosts {
		out.Hosts = append(out.Hosts, &kvtierpb.NvmeHost{Cntlid: h.CNTLID, HostNqn: h.HostNQN, SubNqn: h.SubNQN,
			RemoteAddr: h.RemoteAddr, IoQueues: h.IOQueues})
	}
	return out
}

func settingsToPB(t TierSettings) *kvtierpb.TierSettings {
	return &kvtierpb.TierSettings{OffloadMode: t.OffloadMode, SsdPolicy: t.SSDPolicy, SsdCapacity: t.SSDCapacity,
		SsdHighWatermark: t.SSDHighWatermark}
}

func (s *grpcServer) Heartbeat(ctx context.Context, r *kvtierpb.HeartbeatRequest) (*kvtierpb.HeartbeatResponse, error) {
	req := HeartbeatRequest{Client: r.GetClientId(), Endpoint: r.GetEndpoint(), OffloadSlots: int(r.GetOffloadSlots()),
		Identity: Identity{Incarnation: r.GetIncarnation(), DiskID: r.GetDiskId()},
		Interval: time.Duration(r.GetHeartbeatIntervalMs()) * time.Millisecond, Leaving: r.GetLeaving(), Unhealthy: r.GetUnhealthy(),
		DramDirectory: r.GetDramDirectory(), DramObjects: r.GetDramObjects()}
	for _, sg := range r.GetSegments() {
		req.Segments = append(req.Segments, segmentFromPB(sg))
	}
	if r.GetDisk() != nil {
		d := diskFromPB(r.GetDisk())
		req.Disk = &d
	}
	req.NVMe = nvmeFromPB(r.GetNvme())
	if n := len(r.GetCachedReads()); n > 0 {
		req.CachedReads = make([]CachedRead, n)
		for i, cr := range r.GetCachedReads() {
			req.CachedReads[i] = CachedRead{Tenant: cr.GetTenant(), Key: string(cr.GetKey()), Count: cr.GetCount(),
				LastReadAge: time.Duration(min(cr.GetLastReadAgeMs(), uint64(math.MaxInt64/int64(time.Millisecond)))) * time.Millisecond}
		}
	}
	rep, err := s.m.Heartbeat(ctx, req)
	if err != nil {
		return nil, toGRPC(err)
	}
	out := &kvtierpb.HeartbeatResponse{Known: rep.Known, Settings: settingsToPB(rep.Settings), ForgetDram: rep.ForgetDram,
		DramOutbox: s.m.dram.id}
	for _, t := range rep.Offload {
		out.Offload = append(out.Offload, s.offloadTaskToPB(t))
	}
	if !r.GetLeaving() && s.m.mayHoldGrantKeys(ctx, r.GetClientId()) {
		for _, k := range s.m.GrantKeysForBeat(r.GetClientId(), r.GetIncarnation(), len(r.GetSegments()) > 0 || r.GetDisk() != nil, r.GetGrantKeyIds(), r.GetGrantRefusals()) {
			out.GrantKeys = append(out.GrantKeys, &kvtierpb.GrantKey{Id: k.ID, Secret: bytes.Clone(k.Secret[:])})
		}
	}
	return out, nil
}

// mayHoldGrantKeys reports whether the caller of a heartbeat naming node
// may be handed node's grant keys: open, anyone (the caller names the
// node); with credentials, only the principal node's client ID is bound to
// (an admin may name another's client ID in a call, but its secrets would
// let it sign any grant for that node's data port).
func (m *Master) mayHoldGrantKeys(ctx context.Context, node string) bool {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return true
	}
	b, bound := m.Session(node)
	return bound && b.ID == p.ID
}

// offloadTaskToPB converts t; its source carries a read grant for the node
// (the mover reads its own segment in-process, where grants are not
// checked, but a mover reading over TCP would need one) until the task
// times out.
func (s *grpcServer) offloadTaskToPB(t OffloadTask) *kvtierpb.OffloadTask {
	src := replicaToPB(t.Source)
	src.Grant = s.m.SignGrant(t.Source, s.m.nodeGrantSession(t.Source.Node), grant.Read, s.m.now().Add(s.m.cfg.OffloadTimeout))
	return &kvtierpb.OffloadTask{Tenant: t.Tenant, Key: []byte(t.Key), Size: t.Size, Crc32C: t.CRC32C, Source: src}
}

func (s *grpcServer) TakeOffload(r *kvtierpb.TakeOffloadRequest, stream grpc.ServerStreamingServer[kvtierpb.OffloadTask]) error {
	tasks, err := s.m.TakeOffload(stream.Context(), r.GetClientId(), int(r.GetSlots()), time.Duration(r.GetWaitMs())*time.Millisecond)
	if err != nil {
		return toGRPC(err)
	}
	// A task whose send fails stays dispatched until OffloadTimeout frees
	// it, as one in a lost heartbeat reply does.
	per := 1
	if r.GetBatched() {
		per = takeOffloadPerMessage
	}
	for lo := 0; lo < len(tasks); lo += per {
		chunk := tasks[lo:min(len(tasks), lo+per)]
		msg := s.offloadTaskToPB(chunk[0])
		if len(chunk) > 1 {
			msg.More = make([]*kvtierpb.OffloadTask, 0, len(chunk)-1)
			for _, t := range chunk[1:] {
				msg.More = append(msg.More, s.offloadTaskToPB(t))
			}
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
	return nil
}

// takeOffloadPerMessage is the most tasks one TakeOffload stream message
// carries to an appliance that reads OffloadTask.more (about 100 bytes of
// task each, far below gRPC's 4 MiB message limit).
const takeOffloadPerMessage = 1024

func (s *grpcServer) TakeRemovals(r *kvtierpb.TakeRemovalsRequest, stream grpc.ServerStreamingServer[kvtierpb.TakeRemovalsResponse]) error {
	outbox, rs, err := s.m.TakeRemovals(stream.Context(), r.GetClientId(), r.GetOutbox(), r.GetAckThrough(), time.Duration(r.GetWaitMs())*time.Millisecond)
	if err != nil {
		return toGRPC(err)
	}
	out := &kvtierpb.TakeRemovalsResponse{Outbox: outbox}
	for _, d := range rs {
		pd := &kvtierpb.DiskRemoval{Seq: d.Seq, Tenant: d.Tenant, Key: []byte(d.Key), Cutoff: d.Cutoff, Pattern: d.Pattern}
		for _, l := range d.Keep {
			pd.Keep = append(pd.Keep, &kvtierpb.DiskLocation{Bucket: l.Bucket, Offset: l.Offset})
		}
		out.Removals = append(out.Removals, pd)
	}
	// A lost answer is handed out again: removals stay until acknowledged.
	return stream.Send(out)
}

func (s *grpcServer) OffloadDone(ctx context.Context, r *kvtierpb.OffloadDoneRequest) (*kvtierpb.Empty, error) {
	err := s.m.OffloadDone(ctx, OffloadResult{Client: r.GetClientId(), Tenant: r.GetTenant(), Key: string(r.GetKey()),
		OK: r.GetOk(), Bucket: r.GetBucket(), Offset: r.GetOffset(), Length: r.GetLength(), Error: r.GetError(), Retry: r.GetRetry()})
	return &kvtierpb.Empty{}, toGRPC(err)
}

func (s *grpcServer) BatchOffloadDone(ctx context.Context, r *kvtierpb.BatchOffloadDoneRequest) (*kvtierpb.BatchResponse, error) {
	res := make([]OffloadResult, len(r.GetItems()))
	for i, it := range r.GetItems() {
		res[i] = OffloadResult{Client: it.GetClientId(), Tenant: it.GetTenant(), Key: string(it.GetKey()), OK: it.GetOk(),
			Bucket: it.GetBucket(), Offset: it.GetOffset(), Length: it.GetLength(), Error: it.GetError(), Retry: it.GetRetry()}
	}
	errs, err := s.m.BatchOffloadDone(ctx, r.GetClientId(), res)
	if err != nil {
		return nil, toGRPC(err)
	}
	return keyResults(errs), nil
}

func (s *grpcServer) RegisterDiskObjects(ctx context.Context, r *kvtierpb.RegisterDiskObjectsRequest) (*kvtierpb.BatchResponse, error) {
	objs := make([]DiskObject, len(r.GetObjects()))
	for i, d := range r.GetObjects() {
		objs[i] = DiskObject{Tenant: d.GetTenant(), Key: string(d.GetKey()), Size: d.GetSize(), CRC32C: d.GetCrc32C(),
			Bucket: d.GetBucket(), Offset: d.GetOffset(), Length: d.GetLength()}
	}
	errs, err := s.m.RegisterDiskObjects(ctx, r.GetClientId(), objs)
	if err == nil && r.GetLast() {
		err = s.m.EndDiskRegistration(ctx, r.GetClientId())
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	return keyResults(errs), nil
}

func (s *grpcServer) DropBucket(ctx context.Context, r *kvtierpb.DropBucketRequest) (*kvtierpb.Empty, error) {
	return &kvtierpb.Empty{}, toGRPC(s.m.DropBucket(ctx, r.GetClientId(), r.GetBucket()))
}

func objectToPB(o ObjectInfo) *kvtierpb.ObjectInfo {
	return &kvtierpb.ObjectInfo{Tenant: o.Tenant, Key: []byte(o.Key), Size: o.Size, Crc32C: o.CRC32C,
		HasChecksum: o.HasChecksum, Writer: o.Writer, CreatedMs: ms(o.Created), LeaseDeadlineMs: ms(o.LeaseDeadline),
		SoftPin: o.SoftPin, SoftPinDeadlineMs: ms(o.SoftPinDeadline), HardPin: o.HardPin, ReadCount: o.ReadCount,
		Replicas: replicasToPB(o.Replicas), PutStartedMs: ms(o.PutStarted)}
}

func (s *grpcServer) ListObjects(ctx context.Context, r *kvtierpb.ListObjectsRequest) (*kvtierpb.ListObjectsResponse, error) {
	page, err := s.m.ListObjects(ctx, ListOptions{Tenant: r.GetTenant(), Prefix: string(r.GetPrefix()),
		Cursor: string(r.GetCursor()), Limit: int(r.GetLimit()), AllTenants: r.GetAllTenants()})
	if err != nil {
		return nil, toGRPC(err)
	}
	out := &kvtierpb.ListObjectsResponse{}
	if page.NextCursor != "" {
		out.NextCursor = []byte(page.NextCursor)
	}
	for _, o := range page.Objects {
		out.Objects = append(out.Objects, objectToPB(o))
	}
	return out, nil
}

func (s *grpcServer) GetObject(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.ObjectInfo, error) {
	o, err := s.m.GetObject(ctx, r.GetTenant(), string(r.GetKey()))
	if err != nil {
		return nil, toGRPC(err)
	}
	return objectToPB(o), nil
}

func (s *grpcServer) ListSegments(ctx context.Context, _ *kvtierpb.Empty) (*kvtierpb.ListSegmentsResponse, error) {
	out := &kvtierpb.ListSegmentsResponse{}
	for _, si := range s.m.ListSegments(ctx) {
		out.Segments = append(out.Segments, &kvtierpb.SegmentInfo{Segment: segmentToPB(si.Segment),
			State: kvtierpb.SegmentState(si.State), Used: si.Used, LargestFree: si.LargestFree,
			Replicas: si.Replicas, DrainDeadlineMs: ms(si.DrainDeadline)})
	}
	return out, nil
}

func (s *grpcServer) ListClients(ctx context.Context, _ *kvtierpb.Empty) (*kvtierpb.ListClientsResponse, error) {
	out := &kvtierpb.ListClientsResponse{}
	for _, c := range s.m.ListClients(ctx) {
		out.Clients = append(out.Clients, &kvtierpb.ClientInfo{ClientId: c.ID, Endpoint: c.Endpoint, Segments: c.Segments,
			LastHeartbeatMs: ms(c.LastHeartbeat), State: kvtierpb.ClientState(c.State), Disk: diskToPB(c.Disk),
			Nvme: nvmeToPB(c.NVMe), Problems: c.Problems, Storage: c.Storage, GrantRefusals: s.m.GrantRefusals(c.ID)})
	}
	return out, nil
}

func tierStatsToPB(ts []TierStats) []*kvtierpb.TierStats {
	out := make([]*kvtierpb.TierStats, len(ts))
	for i, t := range ts {
		out[i] = &kvtierpb.TierStats{Tier: t.Tier, Capacity: t.Capacity, Used: t.Used, Objects: t.Objects, Hits: t.Hits, Misses: t.Misses}
	}
	return out
}

func (s *grpcServer) Stats(ctx context.Context, _ *kvtierpb.Empty) (*kvtierpb.StatsResponse, error) {
	st := s.m.Stats(ctx)
	return &kvtierpb.StatsResponse{Objects: st.Objects, Tiers: tierStatsToPB(st.Tiers), Counters: st.Counters,
		HeapBytes: st.HeapBytes, Leader: st.Leader, Rebuilding: st.Rebuilding, RebuildReason: st.RebuildReason,
		LeaderEpoch: s.m.cfg.LeaderEpoch}, nil
}

func tiersToPB(t Tiers) *kvtierpb.TiersResponse {
	return &kvtierpb.TiersResponse{
		Dram: &kvtierpb.DramSettings{HighWatermark: t.Dram.HighWatermark, EvictionRatio: t.Dram.EvictionRatio, LeasePolicy: t.Dram.LeasePolicy},
		Ssd:  settingsToPB(t.SSD), Stats: tierStatsToPB(t.Stats),
	}
}

func (s *grpcServer) GetTiers(ctx context.Context, _ *kvtierpb.Empty) (*kvtierpb.TiersResponse, error) {
	return tiersToPB(s.m.GetTiers(ctx)), nil
}

func (s *grpcServer) UpdateTiers(ctx context.Context, r *kvtierpb.UpdateTiersRequest) (*kvtierpb.TiersResponse, error) {
	t, err := s.m.UpdateTiers(ctx, TierUpdate{HighWatermark: r.HighWatermark, EvictionRatio: r.EvictionRatio,
		LeasePolicy: r.LeasePolicy, OffloadMode: r.OffloadMode, SSDPolicy: r.SsdPolicy, SSDCapacity: r.SsdCapacity,
		SSDHighWatermark: r.SsdHighWatermark})
	if err != nil {
		return nil, toGRPC(err)
	}
	return tiersToPB(t), nil
}

func (s *grpcServer) WatchEvents(_ *kvtierpb.Empty, stream grpc.ServerStreamingServer[kvtierpb.Event]) error {
	sub := s.m.Subscribe(0)
	defer sub.Close()
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-sub.C():
			if !ok {
				return nil
			}
			err := stream.Send(&kvtierpb.Event{TimeMs: ms(ev.Time), Kind: ev.Kind, Tenant: ev.Tenant, Key: []byte(ev.Key),
				Segment: ev.Segment, Node: ev.Node, Bytes: ev.Bytes, Message: ev.Message})
			if err != nil {
				return err
			}
		}
	}
}

// DRAM directory and rebuild (dramdir.go).

func (s *grpcServer) TakeDramRecords(stream grpc.BidiStreamingServer[kvtierpb.TakeDramRecordsRequest, kvtierpb.TakeDramRecordsResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	client := first.GetClientId()
	if err := s.m.AckDramRecords(client, first.GetOutbox(), first.GetAckThrough()); err != nil {
		return toGRPC(err)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() { // the master stops: end the stream (the appliance opens a new one)
		select {
		case <-s.m.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() { // acknowledgements, until the stream ends
		defer cancel()
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			if s.m.AckDramRecords(client, r.GetOutbox(), r.GetAckThrough()) != nil {
				return
			}
		}
	}()
	// The first answer names this master's outbox at once (a new master:
	// the appliance beats now); records not acknowledged are sent again.
	var sent uint64
	// Reused for every message (Send has marshalled it when it returns):
	// a message per put's records otherwise made a sixth of the
	// standalone's garbage under small puts.
	var (
		out   kvtierpb.TakeDramRecordsResponse
		recs  []kvtierpb.DramRecord
		keys  []byte
		timer *time.Timer // one for every wait of this stream
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for answered := false; ; answered = true {
		wait := time.Second
		if !answered {
			wait = 0
		}
		outbox, reset, rs, err := s.m.nextDramRecords(ctx, client, sent, wait, &timer)
		if err != nil {
			return toGRPC(err)
		}
		if ctx.Err() != nil {
			return nil
		}
		if answered && len(rs) == 0 && !reset {
			continue
		}
		dramRecordsPB(&out, &recs, &keys, outbox, reset, rs)
		if err := stream.Send(&out); err != nil {
			return err
		}
		if len(rs) > 0 {
			sent = rs[len(rs)-1].Seq
		}
	}
}

// dramRecordsPB fills out with outbox, reset and rs, reusing recs and
// keys (and out.Records) from the previous answer: out is valid until the
// next call.
func dramRecordsPB(out *kvtierpb.TakeDramRecordsResponse, recs *[]kvtierpb.DramRecord, keys *[]byte, outbox uint64, reset bool, rs []DramRecord) {
	out.Outbox, out.Reset_ = outbox, reset
	if cap(*recs) < len(rs) {
		*recs = make([]kvtierpb.DramRecord, len(rs))
	}
	*recs, *keys = (*recs)[:len(rs)], (*keys)[:0]
	out.Records = out.Records[:0]
	for i, d := range rs {
		k := len(*keys)
		*keys = append(*keys, d.Key...)
		r := &(*recs)[i]
		r.Seq, r.Free, r.Tenant, r.Key, r.Segment = d.Seq, d.Free, d.Tenant, (*keys)[k:len(*keys):len(*keys)], d.Segment
		r.Offset, r.Size, r.Crc32C, r.HasChecksum, r.Version = d.Offset, d.Size, d.CRC32C, d.HasChecksum, d.Version
		r.GrantsExpire, r.Stage = d.GrantsExpire, d.Stage
		out.Records = append(out.Records, r)
	}
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

func (s *grpcServer) PutTicket(ctx context.Context, r *kvtierpb.PutTicketRequest) (*kvtierpb.PutTicketResponse, error) {
	if s.m.cfg.DisableGrants {
		if _, ok := auth.FromContext(ctx); ok {
			// The appliance would name the client's ID under its own
			// credential, which the session binding refuses.
			return nil, toGRPC(kverr.New(kverr.UnavailableInCurrentStatus, "", "direct puts need data-plane grants on a master with credentials"))
		}
		return &kvtierpb.PutTicketResponse{Open: true}, nil
	}
	tok, exp, err := s.m.SignPutTicket(r.GetNode(), r.GetTenant(), r.GetClientId())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &kvtierpb.PutTicketResponse{Ticket: tok, ExpiryMs: exp.UnixMilli()}, nil
}

// itemIdentity checks a coalesced item's ticket (an open master, without
// a caller's credential, takes an item without one as it would take the
// identity a PutStart names) and returns the node it names ("": none).
func (s *grpcServer) itemIdentity(ctx context.Context, tok []byte, tenant, client string) (string, error) {
	if len(tok) > 0 {
		return s.checkTicket(ctx, tok, tenant, client)
	}
	if _, ok := auth.FromContext(ctx); ok {
		return "", kverr.New(kverr.PermissionDenied, "", "a coalesced direct put without a put ticket")
	}
	return "", nil
}

// batchPutStartItems is BatchPutStart of direct puts of many clients
// (per_item_tickets): each item is placed as its own ticket says, on the
// node that names, exactly as PutStart with that ticket.
func (s *grpcServer) batchPutStartItems(ctx context.Context, r *kvtierpb.BatchPutStartRequest) (*kvtierpb.BatchPutStartResponse, error) {
	if r.GetClientId() != "" || r.GetTenant() != "" || len(r.GetPutTicket()) > 0 {
		return nil, toGRPC(kverr.New(kverr.InvalidParams, "", "BatchPutStart: per-item tickets and a batch identity together"))
	}
	out := &kvtierpb.BatchPutStartResponse{Results: make([]*kvtierpb.PutStartResult, len(r.GetItems()))}
	reqs := make([]PutRequest, len(r.GetItems()))
	for i, it := range r.GetItems() {
		g := &kvtierpb.PutStartResult{}
		out.Results[i] = g
		node, err := s.itemIdentity(ctx, it.GetPutTicket(), it.GetTenant(), it.GetClientId())
		var reps []Replica
		req := &reqs[i]
		*req = putFromPB(it)
		if err == nil {
			if node != "" {
				req.Config.OnlyNode = node
			} else {
				req.Config.Stage = 0
			}
			reps, err = s.m.PutStart(ctx, *req)
		}
		if err != nil {
			g.Code, g.Message = kvtierpb.ErrorCode(kverr.CodeOf(err)), err.Error()
			continue
		}
		g.Replicas = replicasToPB(reps)
		g.DramOutbox, g.DramSeq = s.m.commitMark(req.Client, req.Tenant, req.Key)
		g.DramFreeSeq = lastFreeSeq(reps)
		g.Committed = stagedCommitted(req, reps)
	}
	if err := s.m.fenceErr(); err != nil { // deposed meanwhile: acknowledge no staged commit
		return nil, toGRPC(err)
	}
	s.holderRecordsPB(r.GetItems(), reqs, out.Results)
	return out, nil
}

// batchPutEndItems is BatchPutEnd of direct puts of many clients: each
// item's ticket checked, one wait for the holders' acknowledgements (but
// those each item's own node confirms itself: holder_applies).
func (s *grpcServer) batchPutEndItems(ctx context.Context, items []*kvtierpb.KeyRequest) []error {
	out := make([]error, len(items))
	var ws []dramWait
	for i, it := range items {
		node, err := s.itemIdentity(ctx, it.GetPutTicket(), it.GetTenant(), it.GetClientId())
		if err != nil {
			out[i] = err
			continue
		}
		var w []dramWait
		w, out[i] = s.m.putEnd(it.GetClientId(), it.GetTenant(), string(it.GetKey()), endSum(it))
		if it.GetHolderApplies() {
			w = dropWaits(w, node)
		}
		ws = append(ws, w...)
	}
	s.m.awaitCommits(ctx, ws)
	return out
}

// DramRecordsConn is an appliance's TakeDramRecords stream to a master of
// the same process (a standalone): the same messages as the gRPC stream
// (grpcServer.TakeDramRecords), without the handler's goroutines or any
// copy between them. Send applies the acknowledgement in the caller's
// goroutine, which wakes whoever waits for it (a PutEnd, a Remove's free)
// at once; Recv waits for the records itself, so a record queued by a
// PutStart wakes the appliance's stream goroutine and no other. One
// goroutine calls Send and Recv in turn; Recv's answer is reused by the
// next Recv (the appliance copies what it keeps).
type DramRecordsConn struct {
	m        *Master
	ctx      context.Context
	cancel   context.CancelFunc
	client   string
	answered bool   // the first answer (wait 0: names the outbox) went
	sent     uint64 // the records up to sent were answered on this stream
	timer    *time.Timer
	out      kvtierpb.TakeDramRecordsResponse
	recs     []kvtierpb.DramRecord
	keys     []byte
	// TryRecv's own answer and records (its callers are serialized by the
	// appliance, not with Recv's goroutine).
	tout  kvtierpb.TakeDramRecordsResponse
	trecs []kvtierpb.DramRecord
	tkeys []byte
	tbuf  []DramRecord
}

// TryRecv returns at once the records with a seq above after, for an
// appliance that applies its own commit records (PutConfig.HolderPulls)
// instead of waiting for its stream goroutine to; ok is false when there
// is nothing this way (the stream has not started, the queue is unknown
// or must reset the appliance's directory first). It changes nothing in
// the outbox, and may be called beside Recv; its answer is reused by the
// next TryRecv.
func (c *DramRecordsConn) TryRecv(after uint64) (*kvtierpb.TakeDramRecordsResponse, bool) {
	if c.client == "" || c.ctx.Err() != nil {
		return nil, false
	}
	outbox, rs, ok := c.m.peekDramRecords(c.client, after, c.tbuf[:0])
	c.tbuf = rs[:0]
	if !ok {
		return nil, false
	}
	dramRecordsPB(&c.tout, &c.trecs, &c.tkeys, outbox, false, rs)
	return &c.tout, true
}

// Wake wakes the streams waiting for this client's records: an appliance
// that asked for quiet commit records (HolderPulls) and could not take one
// itself leaves it to them.
func (c *DramRecordsConn) Wake() {
	if c.client != "" {
		c.m.wakeDramRecords(c.client)
	}
}

// OpenDramRecords opens an in-process DRAM records stream; it ends with
// ctx, or when the master stops (Recv then answers io.EOF, as the gRPC
// stream does, and the appliance opens another).
func (m *Master) OpenDramRecords(ctx context.Context) *DramRecordsConn {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-m.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	return &DramRecordsConn{m: m, ctx: ctx, cancel: cancel}
}

// Send acknowledges the records applied (outbox up to ack_through); the
// first names the client and starts its queue.
func (c *DramRecordsConn) Send(r *kvtierpb.TakeDramRecordsRequest) error {
	if err := c.ctx.Err(); err != nil {
		return io.EOF
	}
	if c.client == "" {
		c.client = r.GetClientId()
	} else if r.GetClientId() != c.client {
		return toGRPC(kverr.New(kverr.InvalidParams, "", "dram records: client %q on a stream of %q", r.GetClientId(), c.client))
	}
	return toGRPC(c.m.AckDramRecords(c.client, r.GetOutbox(), r.GetAckThrough()))
}

// Recv returns the next records (or at once, the first time, the outbox
// with none), waiting for them as long as the stream lasts.
func (c *DramRecordsConn) Recv() (*kvtierpb.TakeDramRecordsResponse, error) {
	if c.client == "" {
		return nil, toGRPC(kverr.New(kverr.InvalidParams, "", "dram records: Recv before the first Send"))
	}
	for {
		wait := time.Second
		if !c.answered {
			wait = 0
		}
		outbox, reset, rs, err := c.m.nextDramRecords(c.ctx, c.client, c.sent, wait, &c.timer)
		if err != nil {
			return nil, toGRPC(err)
		}
		if c.ctx.Err() != nil {
			c.close()
			return nil, io.EOF
		}
		if c.answered && len(rs) == 0 && !reset {
			continue
		}
		c.answered = true
		dramRecordsPB(&c.out, &c.recs, &c.keys, outbox, reset, rs)
		if len(rs) > 0 {
			c.sent = rs[len(rs)-1].Seq
		}
		return &c.out, nil
	}
}

func (c *DramRecordsConn) close() {
	c.cancel()
	if c.timer != nil {
		c.timer.Stop()
	}
}
