package client

import (
	"time"

	"context"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

func (c *Client) keyBytes(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

func resultErr(key string, code kvtierpb.ErrorCode, msg string) error {
	if code == kvtierpb.ErrorCode_OK {
		return nil
	}
	return &kverr.Error{Code: kverr.Code(code), Key: key, Msg: msg}
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
	req := &kvtierpb.BatchPutStartRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant}
	for i, k := range keys {
		req.Items = append(req.Items, c.putStartReq(k, values[i], o))
	}
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.BatchPutStart(rctx, req)
	cancel()
	if err != nil {
		return fill(errs, kverr.FromGRPC(err))
	}
	if len(resp.Results) != len(keys) {
		return fill(errs, kverr.New(kverr.RPCFail, "", "master answered %d results for %d keys", len(resp.Results), len(keys)))
	}
	// Gather every MEMORY replica write into one batch; NOF replicas go
	// through the initiator per key.
	var reqs []transfer.Request
	var owner []int
	started := make([]bool, len(keys))
	for i, r := range resp.Results {
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
			reqs = append(reqs, transfer.Request{Op: transfer.Write, Endpoint: rep.Endpoint, Segment: rep.Segment, Offset: rep.Offset, Buf: values[i]})
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

// batchGet reads every key into dst(i, size).
func (c *Client) batchGet(ctx context.Context, keys []string, dst func(i int, size uint64) ([]byte, error)) ([]int, []error) {
	sizes := make([]int, len(keys))
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return sizes, errs
	}
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.BatchGetReplicaList(rctx, &kvtierpb.BatchKeysRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Keys: c.keyBytes(keys)})
	cancel()
	if err != nil {
		return sizes, fill(errs, kverr.FromGRPC(err))
	}
	if len(resp.Results) != len(keys) {
		return sizes, fill(errs, kverr.New(kverr.RPCFail, "", "master answered %d results for %d keys", len(resp.Results), len(keys)))
	}
	lists := make([]*ReplicaList, len(keys))
	bufs := make([][]byte, len(keys))
	sums := make([]uint32, len(keys))
	var reqs []transfer.Request
	var owner []int
	for i, r := range resp.Results {
		if e := resultErr(keys[i], r.Code, r.Message); e != nil {
			errs[i] = e
			continue
		}
		lists[i] = replicaList(r.Value)
		if bufs[i], errs[i] = dst(i, lists[i].Size); errs[i] != nil {
			continue
		}
		best := c.ordered(lists[i].Replicas)
		if len(best) > 0 && (best[0].Type == kvtierpb.ReplicaType_MEMORY || best[0].Type == kvtierpb.ReplicaType_LOCAL_DISK) && best[0].Length == lists[i].Size {
			b := best[0]
			req := transfer.Request{Op: transfer.Read, Endpoint: b.Endpoint, Segment: b.Segment, Bucket: b.Bucket, Offset: b.Offset, Buf: bufs[i]}
			if lists[i].HasChecksum {
				req.Sum = &sums[i] // computed while the bytes arrive
			}
			reqs = append(reqs, req)
			owner = append(owner, i)
		} else {
			errs[i] = c.read(ctx, keys[i], lists[i], bufs[i])
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
				errs[i] = c.read(ctx, keys[i], l, bufs[i])
				continue
			}
			if time.Now().After(l.LeaseDeadline) {
				errs[i] = kverr.New(kverr.LeaseExpired, keys[i], "read lease ended during the transfer; query again")
			}
		}
	}
	for i := range keys {
		if errs[i] == nil {
			sizes[i] = len(bufs[i])
		}
	}
	return sizes, errs
}

// BatchExist reports for every key whether it is stored. It never extends a
// lease. A key that is invalid makes the whole call fail.
func (c *Client) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := c.master.BatchExist(rctx, &kvtierpb.BatchKeysRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Keys: c.keyBytes(keys)})
	if err != nil {
		return nil, kverr.FromGRPC(err)
	}
	if len(resp.Exists) != len(keys) {
		return nil, kverr.New(kverr.RPCFail, "", "master answered %d results for %d keys", len(resp.Exists), len(keys))
	}
	for i, r := range resp.Results {
		if e := resultErr(keys[i], r.Code, r.Message); e != nil {
			return nil, e
		}
	}
	return resp.Exists, nil
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
