package client

import (
	"context"
	"strings"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// keyBytes is keys as the wire's bytes fields. They alias the strings (no
// copy per key): a request is only ever marshalled, never written to.
func (c *Client) keyBytes(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = aliasBytes(k)
	}
	return out
}

// aliasBytes returns s's bytes without copying them; the caller must never
// write to them.
func aliasBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// resultErr is a per-key result as an error. The master's messages are
// whole errors ("CODE key=...: reason"); their head is dropped so the
// code and key are not said twice.
func resultErr(key string, code kvtierpb.ErrorCode, msg string) error {
	if code == kvtierpb.ErrorCode_OK {
		return nil
	}
	e := &kverr.Error{Code: kverr.Code(code), Key: key}
	e.Msg = strings.TrimPrefix(msg, e.Error()+": ")
	return e
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// BatchPut stores values[i] under keys[i]: one PutStart for all, the replica
// writes of every key in one transfer batch, then one PutEnd for the keys whose
// replicas were all written and one PutRevoke for the rest. One result per
// key; "already stored" with the same size is success.
func (c *Client) BatchPut(ctx context.Context, keys []string, values [][]byte, opts ...PutOption) []error {
	errs := make([]error, len(keys))
	if len(keys) != len(values) {
		return fill(errs, kverr.New(kverr.InvalidParams, "", "%d keys but %d values", len(keys), len(values)))
	}
	if len(keys) == 0 {
		return errs
	}
	var o PutOptions
	for _, f := range opts {
		f(&o)
	}
	if err := o.check(""); err != nil {
		return fill(errs, err)
	}
	// A bad key or value fails alone, as the master would fail it: the
	// others are put (a direct put frame is refused whole).
	var ok []int
	for i := range keys {
		if errs[i] = CheckItem(keys[i], values[i]); errs[i] == nil {
			ok = append(ok, i)
		}
	}
	if len(ok) < len(keys) {
		if len(ok) > 0 {
			onItems(keys, values, ok, errs, func(ks []string, vs [][]byte) []error { return c.batchPut(ctx, ks, vs, o) })
		}
		return errs
	}
	return c.batchPut(ctx, keys, values, o)
}

// onItems runs put on the items idx of keys and values and records its
// results in errs at their places.
func onItems(keys []string, values [][]byte, idx []int, errs []error, put func([]string, [][]byte) []error) {
	ks, vs := make([]string, len(idx)), make([][]byte, len(idx))
	for j, i := range idx {
		ks[j], vs[j] = keys[i], values[i]
	}
	for j, e := range put(ks, vs) {
		errs[idx[j]] = e
	}
}

// batchPut is BatchPut of checked items.
func (c *Client) batchPut(ctx context.Context, keys []string, values [][]byte, o PutOptions) []error {
	errs := make([]error, len(keys))
	rest := c.batchPutDirect(ctx, keys, values, o, errs)
	if len(rest) == 0 {
		return errs
	}
	if len(rest) < len(keys) { // the keys that did not go direct, the classic way
		onItems(keys, values, rest, errs, func(ks []string, vs [][]byte) []error { return c.batchPutClassic(ctx, ks, vs, o) })
		return errs
	}
	return c.batchPutClassic(ctx, keys, values, o)
}

// batchPutClassic is BatchPut through the master: BatchPutStart, one
// transfer batch, BatchPutEnd.
func (c *Client) batchPutClassic(ctx context.Context, keys []string, values [][]byte, o PutOptions) []error {
	errs := make([]error, len(keys))
	// The items carry neither client nor tenant (the master takes the
	// batch's) and share one configuration, absent when all defaults: per
	// key only its key, size and checksum are encoded and decoded.
	req := &kvtierpb.BatchPutStartRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Items: make([]*kvtierpb.PutStartRequest, len(keys))}
	items := make([]kvtierpb.PutStartRequest, len(keys))
	cfg := o.proto()
	if proto.Size(cfg) == 0 {
		cfg = nil // replica_num 0 means 1, as an absent configuration does
	}
	for i, k := range keys {
		it := &items[i]
		it.Key, it.Size, it.Crc32C, it.HasChecksum, it.Config = aliasBytes(k), uint64(len(values[i])), Checksum(values[i]), true, cfg
		req.Items[i] = it
	}
	results, err := c.batchPutStart(ctx, req)
	if err != nil {
		return fill(errs, err)
	}
	// Gather every MEMORY replica write into one batch; NOF replicas go
	// through the initiator per key.
	var reqs []transfer.Request
	var owner []int
	started := make([]bool, len(keys))
	for i, r := range results {
		if r.Code != kvtierpb.ErrorCode_OK {
			errs[i] = resultErr(keys[i], r.Code, r.Message)
			if kverr.Is(errs[i], kverr.ObjectAlreadyExists) {
				if _, e := c.alreadyStored(ctx, keys[i], uint64(len(values[i])), errs[i]); e == nil {
					errs[i] = nil
				}
			}
			continue
		}
		started[i] = true
		var nofs []*kvtierpb.Replica
		for _, rep := range r.Replicas {
			if rep.Type == kvtierpb.ReplicaType_NOF {
				nofs = append(nofs, rep)
				continue
			}
			reqs = append(reqs, replicaRequest(transfer.Write, rep, 0, values[i]))
			owner = append(owner, i)
		}
		if len(nofs) > 0 {
			if e := c.writeNOF(ctx, nofs, values[i]); e != nil {
				errs[i] = e
			}
		}
		if len(r.Replicas) == 0 {
			errs[i] = kverr.New(kverr.NoAvailableHandle, keys[i], "master allocated no replica")
		}
	}
	if len(reqs) > 0 {
		for j, e := range c.engine.Do(ctx, reqs) {
			if e != nil && errs[owner[j]] == nil {
				errs[owner[j]] = kverr.New(kverr.TransferFail, keys[owner[j]], "write replica %s: %v", reqs[j].Segment, e)
			}
		}
	}
	var end, revoke []string
	var endIdx []int
	for i := range keys {
		if !started[i] {
			continue
		}
		if errs[i] == nil {
			end = append(end, keys[i])
			endIdx = append(endIdx, i)
		} else {
			revoke = append(revoke, keys[i])
		}
	}
	if len(end) > 0 {
		rctx, cancel := c.rpcCtx(ctx)
		r, err := c.master.BatchPutEnd(rctx, &kvtierpb.BatchKeysRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Keys: c.keyBytes(end)})
		cancel()
		switch {
		case err != nil:
			err = kverr.FromGRPC(err)
			for _, i := range endIdx {
				errs[i] = err
			}
			revoke = append(revoke, end...)
		case len(r.Results) != len(end):
			for _, i := range endIdx {
				errs[i] = kverr.New(kverr.RPCFail, keys[i], "short BatchPutEnd answer")
			}
		default:
			for j, res := range r.Results {
				if e := resultErr(end[j], res.Code, res.Message); e != nil {
					errs[endIdx[j]] = e
					revoke = append(revoke, end[j])
				}
			}
		}
	}
	if len(revoke) > 0 {
		rctx, cancel := context.WithTimeout(context.Background(), c.cfg.RPCTimeout)
		if _, err := c.master.BatchPutRevoke(rctx, &kvtierpb.BatchKeysRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Keys: c.keyBytes(revoke)}); err != nil {
			c.cfg.Logger.Warn("batch put revoke failed; the master reclaims after its timeout", "keys", len(revoke), "err", kverr.FromGRPC(err))
		}
		cancel()
	}
	return errs
}

// batchPutStart is BatchPutStart, one result per item of req. The items a
// rebuilding master answers UNAVAILABLE_IN_CURRENT_STATUS (every DRAM
// segment still waits for its appliance's directory report: a restart, a
// new HA leader, a box just started) are asked again, alone, as Put asks
// again (whileRebuilding); the items it took keep their reservations
// meanwhile. An error is returned only when the first call failed whole.
func (c *Client) batchPutStart(ctx context.Context, req *kvtierpb.BatchPutStartRequest) ([]*kvtierpb.PutStartResult, error) {
	out := make([]*kvtierpb.PutStartResult, len(req.Items))
	ask, idx := req, []int(nil) // idx[j]: the item of req that ask's item j is; nil: the same
	err := whileRebuilding(ctx, func() error {
		rctx, cancel := c.rpcCtx(ctx)
		resp, err := c.master.BatchPutStart(rctx, ask)
		cancel()
		switch {
		case err != nil:
			return kverr.FromGRPC(err)
		case len(resp.Results) != len(ask.Items):
			return kverr.New(kverr.RPCFail, "", "master answered %d results for %d keys", len(resp.Results), len(ask.Items))
		}
		var again []int
		for j, r := range resp.Results {
			i := j
			if idx != nil {
				i = idx[j]
			}
			out[i] = r
			if r.GetCode() == kvtierpb.ErrorCode_UNAVAILABLE_IN_CURRENT_STATUS {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return nil
		}
		items := make([]*kvtierpb.PutStartRequest, len(again))
		for j, i := range again {
			items[j] = req.Items[i]
		}
		ask, idx = &kvtierpb.BatchPutStartRequest{ClientId: req.ClientId, Tenant: req.Tenant, Items: items}, again
		return kverr.New(kverr.UnavailableInCurrentStatus, "", "master rebuilding")
	})
	switch {
	case err == nil:
	case idx == nil: // the first call failed whole
		return nil, err
	case !kverr.Is(err, kverr.UnavailableInCurrentStatus):
		// A later call failed whole: its items answer its error. (Still
		// rebuilding: they keep the master's own answer and reason.)
		for _, i := range idx {
			out[i] = &kvtierpb.PutStartResult{Code: kvtierpb.ErrorCode(kverr.CodeOf(err)), Message: err.Error()}
		}
	}
	return out, nil
}

// BatchGet reads every key: one GetReplicaList for all, then the first-choice
// replica of every key in one transfer batch; a key whose first choice fails
// falls back to its other replicas on its own.
func (c *Client) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	vals := make([][]byte, len(keys))
	_, errs := c.batchGet(ctx, keys, func(i int, size uint64) ([]byte, error) {
		vals[i] = make([]byte, size)
		return vals[i], nil
	})
	for i := range vals {
		if errs[i] != nil {
			vals[i] = nil
		}
	}
	return vals, errs
}

// BatchGetInto is BatchGet into the caller's buffers (Mooncake's
// batch_get_into): bufs[i] receives keys[i] and must hold the whole object;
// it returns each object's size. Nothing is allocated per key, so a caller
// that reuses its buffers moves small objects at the transfer's speed.
func (c *Client) BatchGetInto(ctx context.Context, keys []string, bufs [][]byte) ([]int, []error) {
	if len(bufs) != len(keys) {
		errs := fill(make([]error, len(keys)), kverr.New(kverr.InvalidParams, "", "%d keys but %d buffers", len(keys), len(bufs)))
		return make([]int, len(keys)), errs
	}
	return c.batchGet(ctx, keys, func(i int, size uint64) ([]byte, error) {
		if uint64(len(bufs[i])) < size {
			return nil, kverr.New(kverr.InvalidParams, keys[i], "buffer of %d bytes is smaller than the object (%d bytes)", len(bufs[i]), size)
		}
		return bufs[i][:size], nil
	})
}

// batchGet reads every key into dst(i, size) with the single-key Get's
// rules, for all keys at once: a key whose read lease is cached
// (Config.LeaseCacheKeys) is read without asking the master; a key read
// before (Config.ReplicaHints) is read speculatively from the replica its
// previous answer named while one BatchGetReplicaList asks the master about
// every key not served from the cache, and kept only when the answer names
// that same replica and the bytes pass its CRC32C; every other key is read
// from the answer's first-choice replica in a second transfer batch. All
// reads of one round go in one transfer batch (batch frames over TCP). A
// key whose cached or first-choice read fails goes through the single-key
// path alone (fresh answer, every replica in order).
func (c *Client) batchGet(ctx context.Context, keys []string, dst func(i int, size uint64) ([]byte, error)) ([]int, []error) {
	n := len(keys)
	sizes := make([]int, n)
	errs := make([]error, n)
	if n == 0 {
		return sizes, errs
	}
	lists := make([]*ReplicaList, n) // the list the bytes are read by
	bufs := make([][]byte, n)
	sums := make([]uint32, n)
	spec := make([]*kvtierpb.Replica, n) // speculative read's replica (a hint)
	var reqs []transfer.Request
	var owner []int
	var ask []int // keys to ask the master about
	for i, k := range keys {
		if rl := c.leases.get(k); rl != nil {
			if r := c.firstChoice(rl); r != nil {
				if b, err := dst(i, rl.Size); err == nil {
					lists[i], bufs[i] = rl, b
					reqs, owner = append(reqs, readReq(r, b, rl.HasChecksum, &sums[i])), append(owner, i)
					continue
				}
			}
			c.leases.drop(k)
		}
		ask = append(ask, i)
		if h := c.hints.get(k); h != nil && h.HasChecksum {
			if r := c.firstChoice(h); r != nil {
				if b, err := dst(i, h.Size); err == nil {
					lists[i], bufs[i], spec[i] = h, b, r
					reqs, owner = append(reqs, readReq(r, b, true, &sums[i])), append(owner, i)
				}
			}
		}
	}
	var first *transfer.Batch
	if len(reqs) > 0 {
		first = c.engine.Submit(ctx, reqs)
	}
	// Meanwhile, ask the master about every key not served from the cache.
	var resp *kvtierpb.BatchGetReplicaListResponse
	var qerr error
	if len(ask) > 0 {
		akeys := make([]string, len(ask))
		for j, i := range ask {
			akeys[j] = keys[i]
		}
		breq := &kvtierpb.BatchKeysRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Keys: c.keyBytes(akeys)}
		// A master rebuilding its table answers some keys "retry" (as Get
		// retries): asking again is harmless for reads.
		_ = whileRebuilding(ctx, func() error {
			rctx, cancel := c.rpcCtx(ctx)
			resp, qerr = c.master.BatchGetReplicaList(rctx, breq)
			cancel()
			switch {
			case qerr != nil:
				qerr = kverr.FromGRPC(qerr)
				return qerr
			case len(resp.Results) != len(ask):
				qerr = kverr.New(kverr.RPCFail, "", "master answered %d results for %d keys", len(resp.Results), len(ask))
				return qerr
			}
			for _, r := range resp.Results {
				if r.GetCode() == kvtierpb.ErrorCode_UNAVAILABLE_IN_CURRENT_STATUS {
					return kverr.New(kverr.UnavailableInCurrentStatus, "", "master rebuilding")
				}
			}
			return nil
		})
	}
	readOK := make([]bool, n) // the first round's read of i succeeded
	if first != nil {
		for j, e := range first.Wait() {
			readOK[owner[j]] = e == nil
		}
	}
	var retry []int // cached reads that failed: the single-key path
	for _, i := range owner {
		if spec[i] != nil {
			continue
		}
		rl := lists[i]
		if readOK[i] && (!rl.HasChecksum || sums[i] == rl.CRC32C) && time.Now().Before(rl.LeaseDeadline) {
			c.noteCachedRead(keys[i])
			sizes[i] = len(bufs[i])
			continue
		}
		c.leases.drop(keys[i])
		retry = append(retry, i)
	}
	reqs, owner = reqs[:0], owner[:0]
	for j, i := range ask {
		k := keys[i]
		if qerr != nil {
			errs[i] = qerr
			continue
		}
		r := resp.Results[j]
		if e := resultErr(k, r.Code, r.Message); e != nil {
			errs[i] = e
			c.hints.drop(k)
			continue
		}
		rl := replicaList(r.Value)
		if h := spec[i]; h != nil {
			if readOK[i] && rl.HasChecksum && rl.CRC32C == sums[i] && rl.Size == lists[i].Size && listsReplica(rl, h) {
				c.hintHits.Add(1)
				if time.Now().After(rl.LeaseDeadline) {
					errs[i] = kverr.New(kverr.LeaseExpired, k, "read lease ended during the transfer; query again")
					continue
				}
				c.leases.put(k, rl)
				c.hints.put(k, rl)
				sizes[i] = len(bufs[i])
				continue
			}
			c.hintMisses.Add(1)
		}
		lists[i] = rl
		b, err := dst(i, rl.Size)
		if err != nil {
			errs[i] = err
			continue
		}
		bufs[i] = b
		if best := c.firstChoice(rl); best != nil {
			reqs, owner = append(reqs, readReq(best, b, rl.HasChecksum, &sums[i])), append(owner, i)
		} else if errs[i] = c.read(ctx, k, rl, b); errs[i] == nil {
			sizes[i] = len(b)
		}
	}
	if len(reqs) > 0 {
		for j, e := range c.engine.Do(ctx, reqs) {
			i := owner[j]
			l := lists[i]
			if e == nil && l.HasChecksum && sums[i] != l.CRC32C {
				e = kverr.New(kverr.ChecksumMismatch, keys[i], "checksum mismatch")
			}
			if e != nil {
				// Fall back through every replica, the failed one included
				// last-resort, with the single-key path.
				c.hints.drop(keys[i])
				if errs[i] = c.read(ctx, keys[i], l, bufs[i]); errs[i] == nil {
					sizes[i] = len(bufs[i])
				}
				continue
			}
			if time.Now().After(l.LeaseDeadline) {
				errs[i] = kverr.New(kverr.LeaseExpired, keys[i], "read lease ended during the transfer; query again")
				continue
			}
			c.leases.put(keys[i], l)
			c.hints.put(keys[i], l)
			sizes[i] = len(bufs[i])
		}
	}
	for _, i := range retry {
		sizes[i], errs[i] = c.get(ctx, keys[i], func(size uint64) ([]byte, error) { return dst(i, size) })
	}
	return sizes, errs
}

// firstChoice is rl's first-choice replica when the transfer engine reads
// it whole (MEMORY or LOCAL_DISK of the object's size), else nil.
func (c *Client) firstChoice(rl *ReplicaList) *kvtierpb.Replica {
	best := c.ordered(rl.Replicas)
	if len(best) > 0 && (best[0].Type == kvtierpb.ReplicaType_MEMORY || best[0].Type == kvtierpb.ReplicaType_LOCAL_DISK) && best[0].Length == rl.Size {
		return best[0]
	}
	return nil
}

// readReq reads replica r into b, checksummed as the bytes arrive when sum.
func readReq(r *kvtierpb.Replica, b []byte, sum bool, crc *uint32) transfer.Request {
	req := replicaRequest(transfer.Read, r, 0, b)
	if sum {
		req.Sum = crc
	}
	return req
}

// listsReplica reports whether rl lists replica r (same type, segment,
// endpoint, offset, length and bucket).
func listsReplica(rl *ReplicaList, r *kvtierpb.Replica) bool {
	for _, x := range rl.Replicas {
		if x.Type == r.Type && x.Segment == r.Segment && x.Endpoint == r.Endpoint &&
			x.Offset == r.Offset && x.Length == r.Length && x.Bucket == r.Bucket {
			return true
		}
	}
	return false
}

// BatchExist reports for every key whether it is stored. It never extends a
// lease. A key that is invalid makes the whole call fail (BatchExistEach
// answers the others).
func (c *Client) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	exists, errs := c.BatchExistEach(ctx, keys)
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	return exists, nil
}

// BatchExistEach is BatchExist with one result per key: a bad key (empty,
// too long) fails alone, and the others are answered.
func (c *Client) BatchExistEach(ctx context.Context, keys []string) ([]bool, []error) {
	exists, errs := make([]bool, len(keys)), make([]error, len(keys))
	if len(keys) == 0 {
		return exists, errs
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := c.master.BatchExist(rctx, &kvtierpb.BatchKeysRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Keys: c.keyBytes(keys)})
	if err != nil {
		return exists, fill(errs, kverr.FromGRPC(err))
	}
	if len(resp.Exists) != len(keys) || (len(resp.Results) != 0 && len(resp.Results) != len(keys)) {
		return exists, fill(errs, kverr.New(kverr.RPCFail, "", "master answered %d results for %d keys", len(resp.Exists), len(keys)))
	}
	for i, r := range resp.Results {
		errs[i] = resultErr(keys[i], r.Code, r.Message)
	}
	for i, ok := range resp.Exists {
		exists[i] = ok && errs[i] == nil
	}
	return exists, errs
}

// BatchRemove removes every key; one result per key.
func (c *Client) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return errs
	}
	c.leases.drop(keys...)
	c.hints.drop(keys...)
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := c.master.BatchRemove(rctx, &kvtierpb.BatchKeysRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Keys: c.keyBytes(keys), Force: force})
	if err != nil {
		return fill(errs, kverr.FromGRPC(err))
	}
	for i, r := range resp.Results {
		if i < len(errs) {
			errs[i] = resultErr(keys[i], r.Code, r.Message)
		}
	}
	return errs
}
