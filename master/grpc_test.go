package master

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// serve starts m behind a real gRPC server on loopback and returns a client.
func serve(t testing.TB, m *Master, extra ...func(*grpc.Server)) (kvtierpb.MasterClient, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	kvtierpb.RegisterMasterServer(srv, NewGRPCServer(m))
	for _, f := range extra {
		f(srv)
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return kvtierpb.NewMasterClient(conn), conn
}

func TestGRPCTranslation(t *testing.T) {
	m, fc := newTest(t, Config{PutEventSample: 1})
	c, _ := serve(t, m)
	if _, err := c.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: "A", Segment: &kvtierpb.Segment{Name: "A/0", Size: 1 << 20, Endpoint: "127.0.0.1:9"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: "A", Segment: &kvtierpb.Segment{Name: "A/0", Size: 5}})
	wantCode(t, kverr.FromGRPC(err), kverr.SegmentAlreadyExists)

	wctx, cancel := contextWithCancel()
	defer cancel()
	stream, err := c.WatchEvents(wctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	// The subscription is registered asynchronously on the server: retry puts
	// until one event arrives.
	key := []byte{0xff, 0x00, 'k'} // keys are bytes, not UTF-8
	ps, err := c.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "w", Key: key, Size: 100, Crc32C: 9, HasChecksum: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Replicas) != 1 || ps.Replicas[0].State != kvtierpb.ReplicaState_PROCESSING || ps.Replicas[0].Endpoint != "127.0.0.1:9" {
		t.Fatalf("replicas %v", ps.Replicas)
	}
	_, err = c.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "r", Key: key})
	e := kverr.FromGRPC(err)
	wantCode(t, e, kverr.ReplicaIsNotReady)
	if !strings.Contains(e.Error(), `\xff\x00k`) {
		t.Fatalf("binary key not named: %v", e)
	}
	_, err = c.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "r", Key: []byte("missing")})
	if ke := kverr.FromGRPC(err).(*kverr.Error); ke.Code != kverr.ObjectNotFound || ke.Key != "missing" {
		t.Fatalf("error %+v", ke)
	}
	_, err = c.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "intruder", Key: key})
	wantCode(t, kverr.FromGRPC(err), kverr.IllegalClient)
	if _, err := c.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "w", Key: key}); err != nil {
		t.Fatal(err)
	}
	g, err := c.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "r", Key: key})
	if err != nil || g.Size != 100 || g.Crc32C != 9 || !g.HasChecksum || g.LeaseDeadlineMs != t0.Add(DefaultLeaseTTL).UnixMilli() {
		t.Fatalf("get %v %v", g, err)
	}
	_, err = c.Remove(ctx, &kvtierpb.KeyRequest{Key: key})
	wantCode(t, kverr.FromGRPC(err), kverr.ObjectHasLease)
	_, err = c.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "w", Key: []byte("z"), Size: 0})
	wantCode(t, kverr.FromGRPC(err), kverr.InvalidParams)
	_, err = c.RemoveByRegex(ctx, &kvtierpb.RemoveByRegexRequest{Regex: "("})
	wantCode(t, kverr.FromGRPC(err), kverr.InvalidParams)

	// Batches: one result per key, in order, per-key codes.
	bp, err := c.BatchPutStart(ctx, &kvtierpb.BatchPutStartRequest{ClientId: "w", Items: []*kvtierpb.PutStartRequest{
		{Key: []byte("b1"), Size: 10}, {Key: key, Size: 100}, {Key: []byte("b2"), Size: 10},
	}})
	if err != nil || len(bp.Results) != 3 || bp.Results[0].Code != kvtierpb.ErrorCode_OK || bp.Results[1].Code != kvtierpb.ErrorCode_OBJECT_ALREADY_EXISTS || len(bp.Results[2].Replicas) != 1 {
		t.Fatalf("batch put start %v %v", bp, err)
	}
	be, _ := c.BatchPutEnd(ctx, &kvtierpb.BatchKeysRequest{ClientId: "w", Keys: [][]byte{[]byte("b1"), []byte("nope"), []byte("b2")}})
	if be.Results[0].Code != 0 || be.Results[1].Code != kvtierpb.ErrorCode_OBJECT_NOT_FOUND || be.Results[2].Code != 0 {
		t.Fatalf("batch put end %v", be)
	}
	bg, _ := c.BatchGetReplicaList(ctx, &kvtierpb.BatchKeysRequest{Keys: [][]byte{[]byte("b1"), []byte("nope")}})
	if bg.Results[0].Value.GetSize() != 10 || bg.Results[1].Code != kvtierpb.ErrorCode_OBJECT_NOT_FOUND || bg.Results[1].Value != nil {
		t.Fatalf("batch get %v", bg)
	}
	bx, _ := c.BatchExist(ctx, &kvtierpb.BatchKeysRequest{Keys: [][]byte{[]byte("b2"), []byte("nope"), {}}})
	if !bx.Exists[0] || bx.Exists[1] || bx.Results[2].Code != kvtierpb.ErrorCode_INVALID_KEY {
		t.Fatalf("batch exist %v", bx)
	}
	br, _ := c.BatchRemove(ctx, &kvtierpb.BatchKeysRequest{Keys: [][]byte{[]byte("b1"), []byte("b2")}})
	if br.Results[0].Code != kvtierpb.ErrorCode_OBJECT_HAS_LEASE || br.Results[1].Code != 0 {
		t.Fatalf("batch remove %v", br)
	}

	// Heartbeat with an SSD tier hands out offload tasks and settings.
	hb, err := c.Heartbeat(ctx, &kvtierpb.HeartbeatRequest{ClientId: "A", Disk: &kvtierpb.DiskTierStats{Capacity: 1 << 30}, OffloadSlots: 4})
	if err != nil || !hb.Known || hb.Settings.GetOffloadMode() != OffloadImmediate {
		t.Fatalf("heartbeat %v %v", hb, err)
	}
	ps2, _ := c.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "w", Key: []byte("off"), Size: 64})
	_ = ps2
	c.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "w", Key: []byte("off")})
	hb, _ = c.Heartbeat(ctx, &kvtierpb.HeartbeatRequest{ClientId: "A", Disk: &kvtierpb.DiskTierStats{Capacity: 1 << 30}, OffloadSlots: 4})
	if len(hb.Offload) != 1 || string(hb.Offload[0].Key) != "off" || hb.Offload[0].Source.GetSegment() != "A/0" {
		t.Fatalf("offload tasks %v", hb.Offload)
	}
	if _, err := c.OffloadDone(ctx, &kvtierpb.OffloadDoneRequest{ClientId: "A", Key: []byte("off"), Ok: true, Bucket: 4, Length: 64}); err != nil {
		t.Fatal(err)
	}
	oi, err := c.GetObject(ctx, &kvtierpb.KeyRequest{Key: []byte("off")})
	if err != nil || len(oi.Replicas) != 2 || oi.Replicas[1].Type != kvtierpb.ReplicaType_LOCAL_DISK || oi.Replicas[1].Bucket != 4 {
		t.Fatalf("object %v %v", oi, err)
	}
	rr, err := c.RegisterDiskObjects(ctx, &kvtierpb.RegisterDiskObjectsRequest{ClientId: "A", Objects: []*kvtierpb.DiskObject{
		{Key: []byte("d1"), Size: 5, Length: 5, Bucket: 9}, {Key: []byte("off"), Size: 7, Length: 7},
	}})
	if err != nil || rr.Results[0].Code != 0 || rr.Results[1].Code != kvtierpb.ErrorCode_OBJECT_ALREADY_EXISTS {
		t.Fatalf("register %v %v", rr, err)
	}
	if _, err := c.DropBucket(ctx, &kvtierpb.DropBucketRequest{ClientId: "A", Bucket: 9}); err != nil {
		t.Fatal(err)
	}
	_, err = c.DropBucket(ctx, &kvtierpb.DropBucketRequest{ClientId: "ghost", Bucket: 9})
	wantCode(t, kverr.FromGRPC(err), kverr.ClientNotFound)

	// Operators.
	lo, err := c.ListObjects(ctx, &kvtierpb.ListObjectsRequest{Limit: 1})
	if err != nil || len(lo.Objects) != 1 || len(lo.NextCursor) == 0 {
		t.Fatalf("list %v %v", lo, err)
	}
	lo2, _ := c.ListObjects(ctx, &kvtierpb.ListObjectsRequest{Cursor: lo.NextCursor, Limit: 10})
	if len(lo2.Objects) != 2 || len(lo2.NextCursor) != 0 {
		t.Fatalf("page 2 %v", lo2)
	}
	ls, _ := c.ListSegments(ctx, &kvtierpb.Empty{})
	if len(ls.Segments) != 1 || ls.Segments[0].State != kvtierpb.SegmentState_MOUNTED || ls.Segments[0].Used == 0 {
		t.Fatalf("segments %v", ls)
	}
	lc, _ := c.ListClients(ctx, &kvtierpb.Empty{})
	if len(lc.Clients) != 1 || lc.Clients[0].State != kvtierpb.ClientState_LIVE || lc.Clients[0].Disk.GetCapacity() != 1<<30 {
		t.Fatalf("clients %v", lc)
	}
	st, _ := c.Stats(ctx, &kvtierpb.Empty{})
	if st.Objects != 3 || st.Counters["puts_completed"] != 4 || st.Counters["offloads_completed"] != 1 || st.HeapBytes == 0 || len(st.Tiers) != 3 {
		t.Fatalf("stats %v", st)
	}
	for _, n := range CounterNames() {
		if _, ok := st.Counters[n]; !ok {
			t.Fatalf("counter %s missing", n)
		}
	}
	hw := 0.8
	tr, err := c.UpdateTiers(ctx, &kvtierpb.UpdateTiersRequest{HighWatermark: &hw})
	if err != nil || tr.Dram.HighWatermark != 0.8 || tr.Dram.EvictionRatio != DefaultEvictionRatio {
		t.Fatalf("update tiers %v %v", tr, err)
	}
	bad := 2.0
	_, err = c.UpdateTiers(ctx, &kvtierpb.UpdateTiersRequest{EvictionRatio: &bad})
	wantCode(t, kverr.FromGRPC(err), kverr.InvalidParams)
	if gt, _ := c.GetTiers(ctx, &kvtierpb.Empty{}); gt.Dram.EvictionRatio != DefaultEvictionRatio {
		t.Fatal("invalid update applied")
	}
	_, err = c.UnmountSegment(ctx, &kvtierpb.UnmountSegmentRequest{ClientId: "A", Name: "nope"})
	wantCode(t, kverr.FromGRPC(err), kverr.SegmentNotFound)

	// The event stream saw the mount/put/offload traffic (some event arrives).
	got := make(chan *kvtierpb.Event, 1)
	go func() {
		ev, err := stream.Recv()
		if err == nil {
			got <- ev
		}
	}()
	fc.Advance(time.Second)
	for i := 0; ; i++ {
		c.Remove(ctx, &kvtierpb.KeyRequest{Key: []byte("off"), Force: true}) // may emit remove
		c.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: "E", Segment: &kvtierpb.Segment{Name: "E/" + string(rune('a'+i%26)), Size: 4096}})
		select {
		case ev := <-got:
			if ev.Kind == "" || ev.TimeMs == 0 {
				t.Fatalf("event %v", ev)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if i > 100 {
			t.Fatal("no event on the stream")
		}
	}
}

// TestGRPCTakeOffload: the stream carries the tasks with their source
// replica and ends; bad input is INVALID_PARAMS, an unknown client
// CLIENT_NOT_FOUND.
func TestGRPCTakeOffload(t *testing.T) {
	m, _ := newTest(t, Config{})
	c, _ := serve(t, m)
	take := func(req *kvtierpb.TakeOffloadRequest) ([]*kvtierpb.OffloadTask, error) {
		stream, err := c.TakeOffload(ctx, req)
		if err != nil {
			return nil, err
		}
		var out []*kvtierpb.OffloadTask
		for {
			tk, err := stream.Recv()
			if err != nil {
				if err == io.EOF {
					return out, nil
				}
				return out, err
			}
			out = append(out, tk)
		}
	}
	_, err := take(&kvtierpb.TakeOffloadRequest{ClientId: "A", Slots: 1, WaitMs: 10})
	wantCode(t, kverr.FromGRPC(err), kverr.ClientNotFound)
	appliance(t, m, 0)
	for _, bad := range []*kvtierpb.TakeOffloadRequest{
		{ClientId: "A", Slots: 0, WaitMs: 10},
		{ClientId: "A", Slots: 1, WaitMs: 0},
		{ClientId: "A", Slots: 1, WaitMs: 5001},
		{ClientId: "A", Slots: 1 << 31, WaitMs: 10},
	} {
		_, err := take(bad)
		wantCode(t, kverr.FromGRPC(err), kverr.InvalidParams)
	}
	fill(t, m, 2, nil)
	tasks, err := take(&kvtierpb.TakeOffloadRequest{ClientId: "A", Slots: 8, WaitMs: 1000})
	if err != nil || len(tasks) != 2 || string(tasks[0].Key) != "k00" || tasks[0].Size != 64 ||
		tasks[0].Source.GetSegment() != "A/0" || tasks[0].Source.GetType() != kvtierpb.ReplicaType_MEMORY {
		t.Fatalf("tasks %v, err %v", tasks, err)
	}
}
