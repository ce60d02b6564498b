package appliance

import (
	"context"
	"sync"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// coalescer is the PutMaster of a box whose master runs in another
// process: the single PutStart and PutEnd calls of concurrent direct
// puts (one per data-port connection), of any clients, become batch calls
// (BatchPutStart with per_item_tickets, BatchPutEnd with items: each put
// keeps its own client, tenant and ticket, checked by the master one by
// one), so the master's and this box's CPU per put falls under load.
// Batching is natural, with no timer: a call finding none in flight goes
// at once, alone; calls arriving while one is in flight queue, and when
// it returns the first queued caller takes the whole queue as one batch
// call. One caller alone so pays nothing; many share the fixed cost of a
// call. Revokes are rare and go through as they come.
type coalescer struct {
	PutMaster // revokes and the batch calls of multi-put frames: straight through

	mu sync.Mutex
	// guarded by mu: per identity, the calls queued behind the one in
	// flight (an entry exists while a call of that identity is in flight).
	starts map[coalesceKey]*lane[*kvtierpb.PutStartRequest, *kvtierpb.PutStartResponse]
	ends   map[coalesceKey]*lane[*kvtierpb.KeyRequest, *kvtierpb.Empty]
}

// coalesceKey names a lane. One lane per kind of call now (every
// identity shares it, the batch calls carrying per-item identities); kept
// as a key so lanes could be split again (per master, say).
type coalesceKey struct{}

// lane is one identity's queue of calls of one kind.
type lane[Q, R any] struct {
	queue []*waiter[Q, R]
}

// waiter is one call: its request, and once done its answer, or the
// leadership of the next batch.
type waiter[Q, R any] struct {
	req  Q
	resp R
	err  error
	lead bool          // set before done: run the queue as the next batch
	done chan struct{} // closed when resp/err or lead is set
}

func newCoalescer(pm PutMaster) *coalescer {
	return &coalescer{PutMaster: pm,
		starts: map[coalesceKey]*lane[*kvtierpb.PutStartRequest, *kvtierpb.PutStartResponse]{},
		ends:   map[coalesceKey]*lane[*kvtierpb.KeyRequest, *kvtierpb.Empty]{}}
}

// join queues req under k in lanes and runs batches with run while it
// leads; it returns req's answer.
func join[Q, R any](mu *sync.Mutex, lanes map[coalesceKey]*lane[Q, R], k coalesceKey, req Q, run func([]*waiter[Q, R])) (R, error) {
	w := &waiter[Q, R]{req: req, done: make(chan struct{})}
	mu.Lock()
	l, inFlight := lanes[k]
	if !inFlight {
		l = &lane[Q, R]{}
		lanes[k] = l
	} else {
		l.queue = append(l.queue, w)
	}
	mu.Unlock()
	if inFlight {
		<-w.done // w.lead and the answer are written before done closes
		if !w.lead {
			return w.resp, w.err
		}
	}
	// Leading: run the batch (this call alone, or the queue it was handed),
	// then hand the lead to the first call queued meanwhile, if any.
	batch := []*waiter[Q, R]{w}
	if inFlight { // handed the lead: the queue behind it, this call first
		mu.Lock()
		batch, l.queue = l.queue, nil
		mu.Unlock()
		batch = append([]*waiter[Q, R]{w}, batch...)
	}
	run(batch)
	mu.Lock()
	if len(l.queue) == 0 {
		delete(lanes, k)
		mu.Unlock()
	} else {
		next := l.queue[0]
		l.queue = l.queue[1:]
		mu.Unlock()
		next.lead = true
		close(next.done)
	}
	for _, x := range batch {
		if x != w {
			close(x.done)
		}
	}
	return w.resp, w.err
}

func (c *coalescer) PutStart(ctx context.Context, r *kvtierpb.PutStartRequest) (*kvtierpb.PutStartResponse, error) {
	return join(&c.mu, c.starts, coalesceKey{}, r, func(ws []*waiter[*kvtierpb.PutStartRequest, *kvtierpb.PutStartResponse]) {
		if len(ws) == 1 {
			ws[0].resp, ws[0].err = c.PutMaster.PutStart(ctx, ws[0].req)
			return
		}
		req := &kvtierpb.BatchPutStartRequest{PerItemTickets: true, Items: make([]*kvtierpb.PutStartRequest, len(ws))}
		for i, w := range ws {
			req.Items[i] = w.req
		}
		resp, err := c.PutMaster.BatchPutStart(ctx, req)
		if err == nil && len(resp.GetResults()) != len(ws) {
			err = kverr.New(kverr.RPCFail, "", "master answered %d results for %d puts", len(resp.GetResults()), len(ws))
		}
		for i, w := range ws {
			switch {
			case err != nil:
				w.err = err
			case resp.Results[i].GetCode() != kvtierpb.ErrorCode_OK:
				w.err = kverr.New(kverr.Code(resp.Results[i].GetCode()), string(w.req.Key), "%s", resp.Results[i].GetMessage())
			default:
				w.resp = &kvtierpb.PutStartResponse{Replicas: resp.Results[i].GetReplicas(),
					DramOutbox: resp.Results[i].GetDramOutbox(), DramSeq: resp.Results[i].GetDramSeq(), DramFreeSeq: resp.Results[i].GetDramFreeSeq()}
			}
		}
	})
}

func (c *coalescer) PutEnd(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	return join(&c.mu, c.ends, coalesceKey{}, r, func(ws []*waiter[*kvtierpb.KeyRequest, *kvtierpb.Empty]) {
		if len(ws) == 1 {
			ws[0].resp, ws[0].err = c.PutMaster.PutEnd(ctx, ws[0].req)
			return
		}
		req := &kvtierpb.BatchKeysRequest{Items: make([]*kvtierpb.KeyRequest, len(ws))}
		for i, w := range ws {
			req.Items[i] = w.req
		}
		resp, err := c.PutMaster.BatchPutEnd(ctx, req)
		if err == nil && len(resp.GetResults()) != len(ws) {
			err = kverr.New(kverr.RPCFail, "", "master answered %d results for %d puts", len(resp.GetResults()), len(ws))
		}
		for i, w := range ws {
			switch {
			case err != nil:
				w.err = err
			case resp.Results[i].GetCode() != kvtierpb.ErrorCode_OK:
				w.err = kverr.New(kverr.Code(resp.Results[i].GetCode()), string(w.req.Key), "%s", resp.Results[i].GetMessage())
			default:
				w.resp = &kvtierpb.Empty{LeaderEpoch: resp.GetLeaderEpoch()}
			}
		}
	})
}
