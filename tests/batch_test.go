package tests

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// tcpClient is a client of ip whose transfers all go over TCP (batch
// frames), not through the appliances' shared memory.
func (ip *inproc) tcpClient(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.Config{MasterAddr: ip.addr, HeartbeatInterval: 100 * time.Millisecond,
		Transfer: transfer.Config{DisableSharedMemory: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func batchVal(i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("<%d>", i)), 1+(i*331)%5000)
}

// TestBatchOverTCPPerKeyResults: batch calls over TCP keep every rule of the
// single-key path: one result per key in input order, "already stored"
// with the same size is success, a different size is a conflict, a
// corrupted replica is CHECKSUM_MISMATCH and never bytes, a missing key or
// a short buffer fails that key alone.
func TestBatchOverTCPPerKeyResults(t *testing.T) {
	ip := startInproc(t, master.Config{})
	a := ip.appliance(t, appliance.Config{Name: "box"})
	c := ip.tcpClient(t)
	ctx := context.Background()

	if err := c.Put(ctx, "b/conflict", []byte("four")); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "b/same", []byte("same")); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var vals [][]byte
	for i := range 64 {
		keys, vals = append(keys, fmt.Sprintf("b/%d", i)), append(vals, batchVal(i))
	}
	keys, vals = append(keys, "b/conflict", "b/same"), append(vals, []byte("five!"), []byte("SAME"))
	errs := c.BatchPut(ctx, keys, vals)
	for i, err := range errs[:64] {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	if !kverr.Is(errs[64], kverr.ObjectAlreadyExists) || errs[65] != nil {
		t.Fatalf("conflict: %v; same size: %v", errs[64], errs[65])
	}
	if st := c.Engine().Stats(); st.TCPRequests < 64 || st.SharedRequests != 0 {
		t.Fatalf("transfers did not all go over TCP: %+v", st)
	}

	corrupt(t, c, a, "b/7")
	rkeys := append(append([]string{}, keys[:64]...), "b/missing", "b/conflict")
	bufs := make([][]byte, len(rkeys))
	for i := range bufs {
		bufs[i] = make([]byte, 20000)
	}
	bufs[3] = make([]byte, len(vals[3])-1) // one byte short
	sizes, gerrs := c.BatchGetInto(ctx, rkeys, bufs)
	for i, k := range rkeys {
		switch {
		case i == 3:
			if !kverr.Is(gerrs[i], kverr.InvalidParams) || sizes[i] != 0 {
				t.Fatalf("%s into a short buffer: %d, %v", k, sizes[i], gerrs[i])
			}
		case i == 7:
			if !kverr.Is(gerrs[i], kverr.ChecksumMismatch) || sizes[i] != 0 {
				t.Fatalf("corrupted %s: %d, %v", k, sizes[i], gerrs[i])
			}
		case k == "b/missing":
			if !kverr.Is(gerrs[i], kverr.ObjectNotFound) {
				t.Fatalf("missing key: %v", gerrs[i])
			}
		case k == "b/conflict":
			if gerrs[i] != nil || string(bufs[i][:sizes[i]]) != "four" {
				t.Fatalf("conflict key changed: %q, %v", bufs[i][:sizes[i]], gerrs[i])
			}
		default:
			if gerrs[i] != nil || !bytes.Equal(bufs[i][:sizes[i]], vals[i]) {
				t.Fatalf("get %s: %v (%d bytes)", k, gerrs[i], sizes[i])
			}
		}
	}
	got, gerrs := c.BatchGet(ctx, rkeys)
	for i := range rkeys {
		fails := i == 7 || rkeys[i] == "b/missing" // BatchGet sizes its own buffers
		if (gerrs[i] != nil) != fails || (gerrs[i] != nil) != (got[i] == nil) {
			t.Fatalf("BatchGet %s: %d bytes, %v", rkeys[i], len(got[i]), gerrs[i])
		}
		if i < 64 && i != 7 && !bytes.Equal(got[i], vals[i]) {
			t.Fatalf("BatchGet %s: bytes differ", rkeys[i])
		}
	}
	if _, errs := c.BatchGetInto(ctx, rkeys, bufs[:2]); !kverr.Is(errs[0], kverr.InvalidParams) {
		t.Fatalf("keys and buffers of different counts: %v", errs[0])
	}

	// b/9 was read: its read lease is cached, the next batch reads it
	// without the master, and a corruption meanwhile is still caught.
	corrupt(t, c, a, "b/9")
	got, gerrs = c.BatchGet(ctx, keys[8:11])
	if gerrs[0] != nil || gerrs[2] != nil || !kverr.Is(gerrs[1], kverr.ChecksumMismatch) || got[1] != nil {
		t.Fatalf("cached reads after a corruption: %v", gerrs)
	}
	if !bytes.Equal(got[0], vals[8]) || !bytes.Equal(got[2], vals[10]) {
		t.Fatal("cached reads: bytes differ")
	}

	// Without the lease cache every batch asks the master; keys read
	// before are read from their hinted replica meanwhile, kept only when
	// the answer confirms it and the checksum matches.
	nc, err := client.New(ctx, client.Config{MasterAddr: ip.addr, LeaseCacheKeys: -1, Transfer: transfer.Config{DisableSharedMemory: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hk := keys[20:40]
	for round := range 2 {
		got, gerrs := nc.BatchGet(ctx, hk)
		for j, err := range gerrs {
			if err != nil || !bytes.Equal(got[j], vals[20+j]) {
				t.Fatalf("round %d %s: %v", round, hk[j], err)
			}
		}
	}
	if hits, _ := nc.HintStats(); hits != uint64(len(hk)) {
		t.Fatalf("hinted reads kept: %d, want %d", hits, len(hk))
	}
	corrupt(t, nc, a, "b/21")
	got, gerrs = nc.BatchGet(ctx, hk)
	for j, err := range gerrs {
		if j == 1 {
			if !kverr.Is(err, kverr.ChecksumMismatch) || got[j] != nil {
				t.Fatalf("corrupted hinted key: %v", err)
			}
		} else if err != nil || !bytes.Equal(got[j], vals[20+j]) {
			t.Fatalf("%s: %v", hk[j], err)
		}
	}
}

// TestBatchPutPartialTransferFailure: when the writes of some keys of a
// batch fail (their segment vanished from the appliance's data plane while
// the master still allocates in it), exactly those keys fail and are
// revoked; the others are stored and readable.
func TestBatchPutPartialTransferFailure(t *testing.T) {
	ip := startInproc(t, master.Config{})
	a := ip.appliance(t, appliance.Config{Name: "box", DRAM: 32 << 20, SegmentSize: 16 << 20})
	c := ip.tcpClient(t)
	ctx := context.Background()
	segs := a.Segments()
	sort.Strings(segs)
	if len(segs) != 2 {
		t.Fatalf("segments %v, want two", segs)
	}
	// The fault: the data plane forgets one segment (what a crashed or
	// misconfigured box would do); no process boundary lets us cause it
	// for one segment only.
	if err := a.Client().Engine().UnregisterSegment(segs[1]); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var vals [][]byte
	for i := range 40 {
		keys, vals = append(keys, fmt.Sprintf("p/%d", i)), append(vals, batchVal(i))
	}
	errs := c.BatchPut(ctx, keys, vals)
	var ok, failed []int
	for i, err := range errs {
		if err == nil {
			ok = append(ok, i)
			continue
		}
		// The batch goes as a direct put: the box finds its segment gone
		// (SEGMENT_NOT_FOUND); the classic path's write fails (TRANSFER_FAIL).
		if !kverr.Is(err, kverr.SegmentNotFound) && !kverr.Is(err, kverr.TransferFail) {
			t.Fatalf("%s failed with %v, want SEGMENT_NOT_FOUND or TRANSFER_FAIL", keys[i], err)
		}
		failed = append(failed, i)
	}
	// Most free space first: the master alternates between the two
	// equal segments, so both groups are there.
	if len(ok) == 0 || len(failed) == 0 {
		t.Fatalf("%d keys stored, %d failed: want some of each", len(ok), len(failed))
	}
	exist, err := c.BatchExist(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range failed {
		if exist[i] {
			t.Fatalf("failed key %s was not revoked", keys[i])
		}
	}
	for _, i := range ok {
		if !exist[i] {
			t.Fatalf("stored key %s is gone", keys[i])
		}
		info, err := c.Stat(ctx, keys[i])
		if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Segment != segs[0] {
			t.Fatalf("stored key %s: %v %v", keys[i], info, err)
		}
	}
	okKeys := make([]string, len(ok))
	for j, i := range ok {
		okKeys[j] = keys[i]
	}
	got, gerrs := c.BatchGet(ctx, okKeys)
	for j, i := range ok {
		if gerrs[j] != nil || !bytes.Equal(got[j], vals[i]) {
			t.Fatalf("read back %s: %v", keys[i], gerrs[j])
		}
	}
}

// TestBatchPutBadItemFailsAlone: an empty value, an empty key and a key
// above the master's maximum fail alone, each with its own code; the
// other keys of the batch are stored (a direct put frame is refused
// whole, so the SDK must not send them in one). Single puts say the same.
func TestBatchPutBadItemFailsAlone(t *testing.T) {
	ip := startInproc(t, master.Config{})
	ip.appliance(t, appliance.Config{Name: "box"})
	for _, tc := range []struct {
		name string
		c    *client.Client
	}{{"tcp", ip.tcpClient(t)}, {"shm", ip.client(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			long := strings.Repeat("k", master.DefaultMaxKeyLen+1)
			keys := []string{tc.name + "/a", tc.name + "/empty", "", tc.name + "/c", long}
			vals := [][]byte{[]byte("aaa"), nil, []byte("x"), []byte("ccc"), []byte("l")}
			want := []kverr.Code{kverr.OK, kverr.InvalidParams, kverr.InvalidKey, kverr.OK, kverr.InvalidKey}
			errs := tc.c.BatchPut(ctx, keys, vals)
			for i, err := range errs {
				if kverr.CodeOf(err) != want[i] {
					t.Errorf("item %d (key of %d bytes): %v, want %s", i, len(keys[i]), err, want[i])
				}
				if err == nil {
					if got, err := tc.c.Get(ctx, keys[i]); err != nil || !bytes.Equal(got, vals[i]) {
						t.Errorf("%s: %q, %v", keys[i], got, err)
					}
				}
			}
			for i := range keys {
				if keys[i] == "" {
					continue // below
				}
				if err := tc.c.Put(ctx, keys[i]+"/single", vals[i]); kverr.CodeOf(err) != want[i] {
					t.Errorf("single put of item %d: %v, want %s", i, err, want[i])
				}
			}
			if err := tc.c.Put(ctx, "", []byte("x")); !kverr.Is(err, kverr.InvalidKey) {
				t.Errorf("single put of an empty key: %v", err)
			}
		})
	}
}
