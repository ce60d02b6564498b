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

	starts lane[*kvtierpb.PutStartRequest, *kvtierpb.PutStartResponse]
	ends   lane[*kvtierpb.KeyRequest, *kvtierpb.Empty]
}

// lane is one kind of call: whether one is in flight, and the calls
// queued behind it.
type lane[Q, R any] struct {
	mu    sync.Mutex
	busy  bool            // guarded by mu: a call of this lane is in flight
	queue []*waiter[Q, R] // guarded by mu
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

func newCoalescer(pm PutMaster) *coalescer { return &coalescer{PutMaster: pm} }

// join queues req in l and runs batches with run while it leads; it
// returns req's answer.
func (l *lane[Q, R]) join(req Q, run func([]*waiter[Q, R])) (R, error) {
	w := &waiter[Q, R]{req: req, done: make(chan struct{})}
	l.mu.Lock()
	queued := l.busy
	if queued {
		l.queue = append(l.queue, w)
	}
	l.busy = true
	l.mu.Unlock()
	batch := []*waiter[Q, R]{w}
	if queued {
		<-w.done // w.lead and the answer are written before done closes
		if !w.lead {
			return w.resp, w.err
		}
		// Handed the lead: this call first, then the queue behind it.
		l.mu.Lock()
		batch, l.queue = append(batch, l.queue...), nil
		l.mu.Unlock()
	}
	run(batch)
	// Hand the lead to the first call queued meanwhile, if any.
	var next *waiter[Q, R]
	l.mu.Lock()
	if len(l.queue) == 0 {
		l.busy = false
	} else {
		next, l.queue = l.queue[0], l.queue[1:]
	}
	l.mu.Unlock()
	if next != nil {
		next.lead = true
		close(next.done)
	}
	for _, x := range batch[1:] {
		close(x.done)
	}
	return w.resp, w.err
}

func (c *coalescer) PutStart(ctx context.Context, r *kvtierpb.PutStartRequest) (*kvtierpb.PutStartResponse, error) {
	return c.starts.join(r, func(ws []*waiter[*kvtierpb.PutStartRequest, *kvtierpb.PutStartResponse]) {
		if len(ws) == 1 {
			ws[0].resp, ws[0].err = c.PutMaster.PutStart(ctx, ws[0].req)
			return
		}
		req := &kvtierpb.BatchPutStartRequest{PerItemTickets: true, Items: make([]*kvtierpb.PutStartRequest, len(ws))}
		for i, w := range ws {
			req.Items[i] = w.req
		}
		resp, err := c.PutMaster.BatchPutStart(ctx, req)
		errs := itemErrs(resp.GetResults(), err, len(ws), func(i int) string { return string(ws[i].req.Key) })
		for i, w := range ws {
			if w.err = errs[i]; w.err == nil {
				r := resp.Results[i]
				w.resp = &kvtierpb.PutStartResponse{Replicas: r.GetReplicas(),
					DramOutbox: r.GetDramOutbox(), DramSeq: r.GetDramSeq(), DramFreeSeq: r.GetDramFreeSeq(),
					DramRecords: r.GetDramRecords(), Committed: r.GetCommitted()}
			}
		}
	})
}

func (c *coalescer) PutEnd(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	return c.ends.join(r, func(ws []*waiter[*kvtierpb.KeyRequest, *kvtierpb.Empty]) {
		if len(ws) == 1 {
			ws[0].resp, ws[0].err = c.PutMaster.PutEnd(ctx, ws[0].req)
			return
		}
		req := &kvtierpb.BatchKeysRequest{Items: make([]*kvtierpb.KeyRequest, len(ws))}
		for i, w := range ws {
			req.Items[i] = w.req
		}
		resp, err := c.PutMaster.BatchPutEnd(ctx, req)
		errs := itemErrs(resp.GetResults(), err, len(ws), func(i int) string { return string(ws[i].req.Key) })
		for i, w := range ws {
			if w.err = errs[i]; w.err == nil {
				w.resp = &kvtierpb.Empty{LeaderEpoch: resp.GetLeaderEpoch()}
			}
		}
	})
}

// itemResult is one item of a batch answer (PutStartResult, KeyResult).
type itemResult interface {
	GetCode() kvtierpb.ErrorCode
	GetMessage() string
}

// itemErrs turns a batch call's answer for n items into one error per
// item (nil: OK): the call's own error for every item, an answer with
// another number of results as RPC_FAIL, else each item's code under its
// key.
func itemErrs[X itemResult](results []X, err error, n int, key func(i int) string) []error {
	if err == nil && len(results) != n {
		err = kverr.New(kverr.RPCFail, "", "master answered %d results for %d puts", len(results), n)
	}
	errs := make([]error, n)
	for i := range errs {
		switch {
		case err != nil:
			errs[i] = kverr.FromGRPC(err)
		case results[i].GetCode() != kvtierpb.ErrorCode_OK:
			errs[i] = kverr.New(kverr.Code(results[i].GetCode()), key(i), "%s", results[i].GetMessage())
		}
	}
	return errs
}
