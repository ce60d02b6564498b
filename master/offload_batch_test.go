package master

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// diskReplicas returns the LOCAL_DISK replicas of key.
func diskReplicas(t *testing.T, m *Master, key string) (out []Replica) {
	t.Helper()
	for _, r := range info(t, m, key).Replicas {
		if r.Type == LocalDisk {
			out = append(out, r)
		}
	}
	return out
}

// TestBatchOffloadDone: one batch report carries good results, failures,
// skips and bad items; each bad item (unknown key, empty key, a length that
// is not the object's size, a result of another client) gets its own error
// and changes nothing, a copy that a pending removal will delete is refused
// (its object keeps only its DRAM copy), and the good ones are applied
// exactly as OffloadDone applies them.
func TestBatchOffloadDone(t *testing.T) {
	m, _ := newTest(t, Config{RemoveSyncTimeout: 20 * time.Millisecond})
	appliance(t, m, 0)
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "B", Endpoint: "B:7"}); err != nil {
		t.Fatal(err)
	}

	// "k" is removed while its second offload is under way: its first copy
	// landed, the removal of that copy is not acknowledged yet, and the
	// second offload finds the same bytes at the old location (the SSD
	// tier answers "already stored"), which the removal will delete.
	put(t, m, "w", "k", 64)
	if r := appliance(t, m, 1); len(r.Offload) != 1 {
		t.Fatalf("tasks %+v", r.Offload)
	}
	if errs, err := m.BatchOffloadDone(ctx, "A", []OffloadResult{{Key: "k", OK: true, Bucket: 1, Length: 64}}); err != nil || errs[0] != nil {
		t.Fatalf("first copy of k: %v %v", errs, err)
	}
	wantCode(t, m.Remove(ctx, "", "k", true), kverr.UnavailableInCurrentStatus) // not acknowledged
	put(t, m, "w", "k", 64)

	fill(t, m, 6, nil) // k00..k05
	if r := appliance(t, m, 16); len(r.Offload) != 7 {
		t.Fatalf("tasks %+v", r.Offload)
	}
	completed, failed := ctrOf(m, "offloads_completed"), ctrOf(m, "offloads_failed")

	// Refused as a whole: nothing of it is applied.
	if _, err := m.BatchOffloadDone(ctx, "nobody", []OffloadResult{{Key: "k00", OK: true, Bucket: 2, Length: 64}}); kverr.CodeOf(err) != kverr.ClientNotFound {
		t.Fatalf("unknown client: %v", err)
	}
	if _, err := m.BatchOffloadDone(ctx, "A", make([]OffloadResult, MaxOffloadBatch+1)); kverr.CodeOf(err) != kverr.InvalidParams {
		t.Fatalf("oversized batch: %v", err)
	}
	if len(diskReplicas(t, m, "k00")) != 0 || !info(t, m, "k00").OffloadPending {
		t.Fatal("a refused batch changed k00")
	}
	// Another node reporting A's task.
	errs, err := m.BatchOffloadDone(ctx, "B", []OffloadResult{{Key: "k00", OK: true, Bucket: 2, Length: 64}})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, errs[0], kverr.IllegalClient)

	batch := []OffloadResult{
		{Key: "k00", OK: true, Bucket: 2, Offset: 4096, Length: 64},       // 0: lands
		{Key: "k01", OK: true, Bucket: 2, Offset: 8192, Length: 63},       // 1: bad extent
		{Key: "nosuchkey", OK: true, Bucket: 2, Offset: 0, Length: 64},    // 2: unknown key
		{Key: "", OK: true, Bucket: 2, Length: 64},                        // 3: no key
		{Client: "B", Key: "k02", OK: true, Bucket: 2, Length: 64},        // 4: another client's result
		{Key: "k03", Error: "disk full"},                                  // 5: failed
		{Key: "k04", Error: "offload queue full", Retry: true},            // 6: skipped
		{Key: "k", OK: true, Bucket: 1, Length: 64},                       // 7: removed while offloading
		{Key: "k05", OK: true, Bucket: 2, Offset: 12288, Length: 64},      // 8: lands
		{Key: strings.Repeat("x", 1<<20), OK: true, Bucket: 2, Length: 1}, // 9: key too long
	}
	errs, err = m.BatchOffloadDone(ctx, "A", batch)
	if err != nil || len(errs) != len(batch) {
		t.Fatalf("%v %v", errs, err)
	}
	want := []kverr.Code{kverr.OK, kverr.InvalidParams, kverr.ObjectNotFound, kverr.InvalidKey, kverr.IllegalClient,
		kverr.OK, kverr.OK, kverr.ObjectNotFound, kverr.OK, kverr.InvalidKey}
	for i, c := range want {
		if kverr.CodeOf(errs[i]) != c {
			t.Errorf("item %d (%.20q): got %v, want %v", i, batch[i].Key, errs[i], c)
		}
	}
	for _, k := range []string{"k00", "k05"} {
		d := diskReplicas(t, m, k)
		if len(d) != 1 || d[0].State != Complete || d[0].Bucket != 2 || info(t, m, k).OffloadPending {
			t.Fatalf("%s: disk replicas %+v", k, d)
		}
	}
	if d := diskReplicas(t, m, "k00"); d[0].Offset != 4096 {
		t.Fatalf("k00 at %+v", d)
	}
	// The refused items changed nothing: still pending, no disk replica.
	for _, k := range []string{"k01", "k02"} {
		if len(diskReplicas(t, m, k)) != 0 || !info(t, m, k).OffloadPending {
			t.Fatalf("%s changed by a refused item: %+v", k, info(t, m, k))
		}
	}
	if i := info(t, m, "k"); len(i.Replicas) != 1 || i.Replicas[0].Type != Memory {
		t.Fatalf("a copy under a pending removal became a replica: %+v", i)
	}
	// A failure and a skip release the pin; only the failure may leave DRAM
	// without a disk copy.
	if info(t, m, "k03").OffloadPending || info(t, m, "k04").OffloadPending {
		t.Fatal("a failed or skipped offload still pins its object")
	}
	if got := ctrOf(m, "offloads_completed") - completed; got != 2 {
		t.Fatalf("completed %d, want 2", got)
	}
	if got := ctrOf(m, "offloads_failed") - failed; got != 2 { // k03, and k's refused copy
		t.Fatalf("failed %d, want 2", got)
	}
	// k01 can still land with a good report.
	if errs, err := m.BatchOffloadDone(ctx, "A", []OffloadResult{{Key: "k01", OK: true, Bucket: 2, Offset: 8192, Length: 64}}); err != nil || errs[0] != nil {
		t.Fatalf("k01 after its bad report: %v %v", errs, err)
	}
}

// TestBatchOffloadDoneGRPC: the batch over gRPC, one KeyResult per item in
// order, the whole call refused for an unknown client.
func TestBatchOffloadDoneGRPC(t *testing.T) {
	m, _ := newTest(t, Config{})
	c, _ := serve(t, m)
	appliance(t, m, 0)
	fill(t, m, 3, nil)
	if r := appliance(t, m, 8); len(r.Offload) != 3 {
		t.Fatalf("tasks %+v", r.Offload)
	}
	req := &kvtierpb.BatchOffloadDoneRequest{ClientId: "A"}
	for i := range 3 {
		req.Items = append(req.Items, &kvtierpb.OffloadDoneRequest{Key: fmt.Appendf(nil, "k%02d", i), Ok: true, Bucket: 3, Offset: uint64(i) * 4096, Length: 64})
	}
	req.Items = append(req.Items, &kvtierpb.OffloadDoneRequest{Key: []byte("gone"), Ok: true, Bucket: 3, Length: 64})
	req.Items[1].Length = 65
	resp, err := c.BatchOffloadDone(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := []kvtierpb.ErrorCode{kvtierpb.ErrorCode_OK, kvtierpb.ErrorCode(kverr.InvalidParams), kvtierpb.ErrorCode_OK, kvtierpb.ErrorCode(kverr.ObjectNotFound)}
	if len(resp.Results) != len(want) {
		t.Fatalf("results %v", resp.Results)
	}
	for i, w := range want {
		if resp.Results[i].Code != w || (w != kvtierpb.ErrorCode_OK) != (resp.Results[i].Message != "") {
			t.Errorf("item %d: %v, want %v", i, resp.Results[i], w)
		}
	}
	if len(diskReplicas(t, m, "k00")) != 1 || len(diskReplicas(t, m, "k01")) != 0 || len(diskReplicas(t, m, "k02")) != 1 {
		t.Fatal("the batch was not applied item by item")
	}
	_, err = c.BatchOffloadDone(ctx, &kvtierpb.BatchOffloadDoneRequest{ClientId: "nobody", Items: req.Items[:1]})
	wantCode(t, kverr.FromGRPC(err), kverr.ClientNotFound)
}

// TestOffloadQueueFIFO: pop hands out queued keys oldest first, each once,
// skipping keys no longer queued, across the head compactions and with
// keys queued while earlier ones are being taken.
func TestOffloadQueueFIFO(t *testing.T) {
	var q offloadQueue
	q.init(1 << 20)
	var want []string
	next := 0
	add := func(n int) {
		for range n {
			k := fmt.Sprintf("c%06d", next)
			next++
			if !q.enqueue("A", k) {
				t.Fatalf("enqueue %s refused", k)
			}
			if next%7 == 0 {
				q.unqueue(k) // stale: skipped by pop
				continue
			}
			want = append(want, k)
		}
	}
	add(10000)
	var got []string
	for round := 0; ; round++ {
		if round == 5 {
			add(9000)
		}
		out := q.pop("A", 333)
		if len(out) == 0 {
			break
		}
		got = append(got, out...)
		if f := q.fifo["A"]; f != nil && f.head > len(f.keys) {
			t.Fatalf("head %d past %d keys", f.head, len(f.keys))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("popped %d keys, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pop %d: %s, want %s", i, got[i], want[i])
		}
	}
	if _, ok := q.fifo["A"]; ok || len(q.queued) != 0 {
		t.Fatalf("queue not empty after popping everything: %d fifo, %d queued", len(q.fifo), len(q.queued))
	}
	select {
	case <-q.ready("A"):
		t.Fatal("ready with nothing queued")
	default:
	}
}

// TestTakeOffloadBatchedGRPC: an appliance that reads OffloadTask.more gets
// its tasks packed into one stream message; one that does not (an older
// appliance) gets one message per task. Either way each task once.
func TestTakeOffloadBatchedGRPC(t *testing.T) {
	for _, batched := range []bool{false, true} {
		m, _ := newTest(t, Config{})
		c, _ := serve(t, m)
		appliance(t, m, 0)
		fill(t, m, 5, nil)
		stream, err := c.TakeOffload(ctx, &kvtierpb.TakeOffloadRequest{ClientId: "A", Slots: 8, WaitMs: 1000, Batched: batched})
		if err != nil {
			t.Fatal(err)
		}
		var msgs int
		seen := map[string]int{}
		for {
			task, err := stream.Recv()
			if err != nil {
				break
			}
			msgs++
			for i, tk := range append([]*kvtierpb.OffloadTask{task}, task.More...) {
				seen[string(tk.Key)]++
				if tk.Size != 64 || tk.Source.GetSegment() != "A/0" || (i > 0 && len(tk.More) != 0) {
					t.Fatalf("task %v", tk)
				}
			}
		}
		wantMsgs := 5
		if batched {
			wantMsgs = 1
		}
		if msgs != wantMsgs || len(seen) != 5 {
			t.Fatalf("batched=%v: %d messages for %v, want %d messages for 5 keys", batched, msgs, seen, wantMsgs)
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("batched=%v: %s handed out %d times", batched, k, n)
			}
		}
	}
}
