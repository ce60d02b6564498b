package appliance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// slowMaster stands in for a master in another process (the real one is
// in tests/directput_test.go): it answers after a delay, places every put
// at an offset named by its key, refuses keys starting with "x", and
// counts single and batch calls.
type slowMaster struct {
	delay                 time.Duration
	singles, batches, max atomic.Int64
}

func (s *slowMaster) place(key []byte) (*kvtierpb.PutStartResponse, error) {
	if key[0] == 'x' {
		return nil, kverr.New(kverr.ObjectAlreadyExists, string(key), "already stored")
	}
	var off uint64
	fmt.Sscanf(string(key), "k%d", &off)
	return &kvtierpb.PutStartResponse{Replicas: []*kvtierpb.Replica{{Segment: "s", Offset: off}}}, nil
}

func (s *slowMaster) PutStart(_ context.Context, r *kvtierpb.PutStartRequest) (*kvtierpb.PutStartResponse, error) {
	s.singles.Add(1)
	time.Sleep(s.delay)
	return s.place(r.Key)
}
func (s *slowMaster) PutEnd(context.Context, *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	s.singles.Add(1)
	time.Sleep(s.delay)
	return &kvtierpb.Empty{}, nil
}
func (s *slowMaster) PutRevoke(context.Context, *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	return &kvtierpb.Empty{}, nil
}
func (s *slowMaster) BatchPutStart(_ context.Context, r *kvtierpb.BatchPutStartRequest) (*kvtierpb.BatchPutStartResponse, error) {
	s.batches.Add(1)
	if !r.PerItemTickets {
		return nil, kverr.New(kverr.InvalidParams, "", "not per-item")
	}
	if n := int64(len(r.Items)); n > s.max.Load() {
		s.max.Store(n)
	}
	time.Sleep(s.delay)
	out := &kvtierpb.BatchPutStartResponse{}
	for _, it := range r.Items {
		resp, err := s.place(it.Key)
		res := &kvtierpb.PutStartResult{}
		if err != nil {
			res.Code, res.Message = kvtierpb.ErrorCode(kverr.CodeOf(err)), err.Error()
		} else {
			res.Replicas = resp.Replicas
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}
func (s *slowMaster) BatchPutEnd(_ context.Context, r *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error) {
	s.batches.Add(1)
	time.Sleep(s.delay)
	out := &kvtierpb.BatchResponse{}
	for _, it := range r.Items {
		res := &kvtierpb.KeyResult{}
		if it.ClientId == "" || len(r.Keys) > 0 {
			res.Code = kvtierpb.ErrorCode_INVALID_PARAMS
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}
func (s *slowMaster) BatchPutRevoke(context.Context, *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error) {
	return &kvtierpb.BatchResponse{}, nil
}

// TestCoalescer: a lone call goes through as a single call; concurrent
// calls (of 32 clients) while one is in flight become batch calls, each
// item with its own client; every caller gets its own answer (placement
// or refusal), whatever batch it travelled in.
func TestCoalescer(t *testing.T) {
	sm := &slowMaster{delay: 2 * time.Millisecond}
	c := newCoalescer(sm)
	ctx := context.Background()
	r, err := c.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "c", Key: []byte("k7")})
	if err != nil || r.Replicas[0].Offset != 7 || sm.singles.Load() != 1 || sm.batches.Load() != 0 {
		t.Fatalf("lone call: %v %v singles %d batches %d", r, err, sm.singles.Load(), sm.batches.Load())
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				key := fmt.Sprintf("k%d", g*100+i)
				if i%7 == 3 {
					key = "x" + key
				}
				client := fmt.Sprintf("client-%d", g)
				r, err := c.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: client, Key: []byte(key)})
				switch {
				case key[0] == 'x':
					if !kverr.Is(err, kverr.ObjectAlreadyExists) {
						t.Errorf("%s: %v", key, err)
					}
				case err != nil || r.Replicas[0].Offset != uint64(g*100+i):
					t.Errorf("%s: %v %v", key, r, err)
				}
				if _, err := c.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: client, Key: []byte(key)}); err != nil {
					t.Errorf("end %s: %v", key, err)
				}
			}
		})
	}
	wg.Wait()
	calls := sm.singles.Load() + sm.batches.Load()
	if sm.batches.Load() == 0 || sm.max.Load() < 4 || calls > 2*32*20/2 {
		t.Fatalf("%d single and %d batch calls (largest %d) for %d puts: not coalesced", sm.singles.Load(), sm.batches.Load(), sm.max.Load(), 32*20)
	}
	t.Logf("%d puts: %d single, %d batch calls, largest batch %d", 32*20, sm.singles.Load(), sm.batches.Load(), sm.max.Load())
}
