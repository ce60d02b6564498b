package master

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// BenchmarkHandlerBatchPut16: the master's CPU for one batch put of 16 keys
// of 64 KiB with write grants on, as the fast path runs it: decode the
// request, run the gRPC handler, encode the answer, for BatchPutStart and
// BatchPutEnd; and for the batch's read (BatchGetReplicaList). Reports
// allocations per batch beside ns.
func BenchmarkHandlerBatchPut16(b *testing.B) {
	m, err := New(Config{OffloadMode: OffloadOff, ClientTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment(context.Background(), "box", Segment{Name: "box/0", Size: 1 << 44, Endpoint: "box:1"}); err != nil {
		b.Fatal(err)
	}
	m.EnsureGrantKeys("box", "inc-1")
	s := &grpcServer{m: m}
	const n = 16
	seq := 0
	keys := func() [][]byte {
		ks := make([][]byte, n)
		for i := range ks {
			seq++
			ks[i] = []byte("bench-key-" + strconv.Itoa(seq))
		}
		return ks
	}
	roundTrip := func(in, out proto.Message, h func() (proto.Message, error)) {
		wire, _ := proto.Marshal(in)
		if err := proto.Unmarshal(wire, out); err != nil {
			b.Fatal(err)
		}
		r, err := h()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := proto.Marshal(r); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("put", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ks := keys()
			q := &kvtierpb.BatchPutStartRequest{ClientId: "w", Items: make([]*kvtierpb.PutStartRequest, n)}
			for i := range q.Items {
				q.Items[i] = &kvtierpb.PutStartRequest{ClientId: "w", Key: ks[i], Size: 64 << 10, Crc32C: 7, HasChecksum: true}
			}
			var rq kvtierpb.BatchPutStartRequest
			roundTrip(q, &rq, func() (proto.Message, error) { return s.BatchPutStart(ctx, &rq) })
			var re kvtierpb.BatchKeysRequest
			roundTrip(&kvtierpb.BatchKeysRequest{ClientId: "w", Keys: ks}, &re, func() (proto.Message, error) { return s.BatchPutEnd(ctx, &re) })
			var rg kvtierpb.BatchKeysRequest
			roundTrip(&kvtierpb.BatchKeysRequest{ClientId: "w", Keys: ks}, &rg, func() (proto.Message, error) { return s.BatchGetReplicaList(ctx, &rg) })
			if seq%(1<<14) == 0 {
				b.StopTimer()
				m.RemoveAll(ctx, "", true)
				b.StartTimer()
			}
		}
	})
}
