package client

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// ReplicaList is what GetReplicaList answered: the object's size, checksum,
// read-lease deadline and COMPLETE replicas.
type ReplicaList struct {
	Size          uint64
	CRC32C        uint32
	HasChecksum   bool
	LeaseDeadline time.Time
	Replicas      []*kvtierpb.Replica
}

// Query asks the master where key's replicas are. It grants or extends the
// read lease, as a read does.
func (c *Client) Query(ctx context.Context, key string) (*ReplicaList, error) {
	var resp *kvtierpb.GetReplicaListResponse
	err := whileRebuilding(ctx, func() error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = c.master.GetReplicaList(rctx, &kvtierpb.KeyRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Key: aliasBytes(key)})
		return kverr.FromGRPC(err)
	})
	if err != nil {
		return nil, err
	}
	return replicaList(resp), nil
}

func replicaList(r *kvtierpb.GetReplicaListResponse) *ReplicaList {
	return &ReplicaList{Size: r.Size, CRC32C: r.Crc32C, HasChecksum: r.HasChecksum,
		LeaseDeadline: time.UnixMilli(r.LeaseDeadlineMs), Replicas: r.Replicas}
}

// Get returns the value stored under key.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	var buf []byte
	_, err := c.get(ctx, key, func(size uint64) ([]byte, error) {
		if uint64(len(buf)) != size {
			buf = make([]byte, size)
		}
		return buf, nil
	})
	if err != nil {
		return nil, err
	}
	return buf, nil
}

// GetInto reads key's value into buf and returns its size. buf must be at
// least as large as the object (INVALID_PARAMS otherwise, nothing read).
func (c *Client) GetInto(ctx context.Context, key string, buf []byte) (int, error) {
	return c.get(ctx, key, func(size uint64) ([]byte, error) {
		if uint64(len(buf)) < size {
			return nil, kverr.New(kverr.InvalidParams, key, "buffer of %d bytes is smaller than the object (%d bytes)", len(buf), size)
		}
		return buf[:size], nil
	})
}

// get asks the master for key's replicas (or reuses a running lease, see
// Config.LeaseCacheKeys) and reads the object into dst(size). A read lease
// that ended during the transfer (a large object on a slow or loaded path:
// the replicas' grants expire with the lease) is asked for again once, with
// a fresh lease, before LEASE_EXPIRED reaches the caller.
func (c *Client) get(ctx context.Context, key string, dst func(size uint64) ([]byte, error)) (int, error) {
	n, err := c.getOnce(ctx, key, dst)
	if err != nil && kverr.Is(err, kverr.LeaseExpired) && ctx.Err() == nil {
		c.leases.drop(key)
		n, err = c.getOnce(context.WithValue(ctx, wholeLeaseKey{}, true), key, dst)
	}
	return n, err
}

// wholeLeaseKey marks the context of a get's second query: each replica
// may take the whole lease (replicaCtx), so a read that needs more than
// half of it still succeeds then.
type wholeLeaseKey struct{}

// replicaCtx bounds the read of a replica that has others after it: half
// of what is left of the lease on a get's first query. A replica whose box
// stopped answering then gives way to the next while the lease, and with
// it that replica's grant, still runs (the engine abandons the frame on
// the wire: transfer.Engine.Do), instead of holding the read for the
// engine's IOTimeout (30 s) and the lease with it. The last replica, and
// every replica of a second query, may take the whole lease.
func replicaCtx(ctx context.Context, rl *ReplicaList, more bool) (context.Context, context.CancelFunc) {
	if !more || ctx.Value(wholeLeaseKey{}) != nil {
		return ctx, func() {}
	}
	left := time.Until(rl.LeaseDeadline)
	if left <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, left/2)
}

func (c *Client) getOnce(ctx context.Context, key string, dst func(size uint64) ([]byte, error)) (int, error) {
	c.activeGets.Add(1)
	defer c.activeGets.Add(-1)
	if rl := c.leases.get(key); rl != nil {
		if b, err := dst(rl.Size); err == nil && c.read(ctx, key, rl, b) == nil {
			c.noteCachedRead(key)
			c.yieldAfter(len(b))
			return len(b), nil
		}
		c.leases.drop(key) // ask the master: the object may have changed
	}
	var spec *speculation
	if h := c.hints.get(key); h != nil {
		spec = c.speculate(ctx, h, dst)
	}
	rl, err := c.Query(ctx, key)
	if spec != nil && !spec.confirmed(rl, err) {
		c.hintMisses.Add(1)
		spec = nil
	}
	if spec != nil {
		c.hintHits.Add(1)
		if time.Now().After(rl.LeaseDeadline) {
			return 0, kverr.New(kverr.LeaseExpired, key, "read lease ended at %s during the transfer; query again", rl.LeaseDeadline.Format(time.RFC3339Nano))
		}
		c.leases.put(key, rl)
		c.hints.put(key, rl)
		return len(spec.buf), nil
	}
	if err != nil {
		c.hints.drop(key)
		return 0, err
	}
	b, err := dst(rl.Size)
	if err != nil {
		return 0, err
	}
	if err := c.read(ctx, key, rl, b); err != nil {
		c.hints.drop(key)
		return 0, err
	}
	c.leases.put(key, rl)
	c.hints.put(key, rl)
	return len(b), nil
}

// yieldEvery is how many bytes of Gets served without blocking the client
// lets pass between two yields of the CPU (see yieldAfter).
const yieldEvery = 1 << 20

// yieldAfter yields the CPU once every yieldEvery bytes of Gets that never
// blocked (lease cache, then a copy from this process's or a shared
// segment). Without it a busy caller keeps its P for the scheduler's whole
// 10 ms slice while the other callers wait. kvtier bench against a
// standalone on 2 cores, same run, without / with: 1 MiB Gets at 50
// callers p99 60 / 6.9 ms, p99.9 581 / 17.5 ms; at 4 callers p99.9 35 /
// 1 ms; 64 KiB at 50 callers p99.9 60 / 5.6 ms; throughput unchanged
// (14.6 / 14.3 GB/s at 50 callers, 7.0 / 7.3 at one).
//
// Only while more Gets run than there are Ps: a yield with an idle P
// around wakes it (a futex and often a virtual-CPU wake-up here), which
// cost a lone caller ~10 % of a 1 MiB same-process Get.
func (c *Client) yieldAfter(n int) {
	if c.activeGets.Load() <= int32(runtime.GOMAXPROCS(0)) {
		return
	}
	if c.sinceYield.Add(int64(n)) >= yieldEvery {
		c.sinceYield.Store(0)
		runtime.Gosched()
	}
}

// speculation is a read of the replica a key's previous answer named,
// started before the master answers again (Config.ReplicaHints).
type speculation struct {
	hint  *ReplicaList
	r     *kvtierpb.Replica
	buf   []byte
	crc   uint32
	batch *transfer.Batch
}

// speculate starts reading h's best replica into dst(h.Size); nil when it
// cannot (no checksum to verify the bytes by, no transfer-engine replica,
// a buffer refused).
func (c *Client) speculate(ctx context.Context, h *ReplicaList, dst func(uint64) ([]byte, error)) *speculation {
	if !h.HasChecksum || len(h.Replicas) == 0 {
		return nil
	}
	r := c.ordered(h.Replicas)[0]
	if (r.Type != kvtierpb.ReplicaType_MEMORY && r.Type != kvtierpb.ReplicaType_LOCAL_DISK) || r.Length != h.Size {
		return nil
	}
	if grantExpired(r.Grant) {
		// The node would refuse it (and count an attack): a read grant
		// lives as long as its read lease, which a hint outlives.
		return nil
	}
	b, err := dst(h.Size)
	if err != nil {
		return nil
	}
	s := &speculation{hint: h, r: r, buf: b}
	req := []transfer.Request{replicaRequest(transfer.Read, r, 0, b)}
	req[0].Sum = &s.crc
	s.batch = c.engine.Submit(ctx, req)
	return s
}

// grantExpired reports whether a replica's data-plane grant has expired
// (its expiry is not secret; the node checks it again). No grant: false.
func grantExpired(tok []byte) bool {
	if len(tok) == 0 {
		return false
	}
	g, err := grant.Decode(tok)
	return err != nil || time.Now().UnixNano() >= g.Expiry
}

// confirmed waits for the speculative read and reports whether its bytes
// are the object the master's answer rl describes: rl lists the same
// replica, with the same size, and the bytes pass rl's CRC32C. The buffer
// is free for another read once this returns.
func (s *speculation) confirmed(rl *ReplicaList, queryErr error) bool {
	if s.batch.Wait()[0] != nil || queryErr != nil {
		return false
	}
	if !rl.HasChecksum || rl.CRC32C != s.crc || rl.Size != s.hint.Size {
		return false
	}
	for _, r := range rl.Replicas {
		if r.Type == s.r.Type && r.Segment == s.r.Segment && r.Endpoint == s.r.Endpoint &&
			r.Offset == s.r.Offset && r.Length == s.r.Length && r.Bucket == s.r.Bucket {
			return true
		}
	}
	return false
}

// priority ranks a replica by the design's fixed order: local MEMORY, any
// MEMORY, local NOF, any NOF, LOCAL_DISK. Lower is better.
func (c *Client) priority(r *kvtierpb.Replica) int {
	local := c.isLocal(r)
	switch r.Type {
	case kvtierpb.ReplicaType_MEMORY:
		if local {
			return 0
		}
		return 1
	case kvtierpb.ReplicaType_NOF:
		if local {
			return 2
		}
		return 3
	case kvtierpb.ReplicaType_LOCAL_DISK:
		return 4
	}
	return 5
}

func (c *Client) ordered(rs []*kvtierpb.Replica) []*kvtierpb.Replica {
	out := slices.Clone(rs)
	// Stable: the master lists replicas on grace segments last; keep that
	// order within one priority class. A replica on an endpoint a read
	// recently gave up on goes after every other.
	slices.SortStableFunc(out, func(a, b *kvtierpb.Replica) int { return c.priority(a) - c.priority(b) })
	if len(out) > 1 {
		now := time.Now().UnixNano()
		var late []*kvtierpb.Replica
		out = slices.DeleteFunc(out, func(r *kvtierpb.Replica) bool {
			until, ok := c.stalled.Load(r.Endpoint)
			if ok && until.(int64) <= now {
				c.stalled.CompareAndDelete(r.Endpoint, until)
			}
			if ok && until.(int64) > now {
				late = append(late, r)
				return true
			}
			return false
		})
		out = append(out, late...)
	}
	return out
}

// stallMemory is how long a read lists a replica last after giving up on
// its endpoint: about until the master marks a box that stopped answering
// suspect (2.5 heartbeats) and stops handing out its replicas.
const stallMemory = 5 * time.Second

// read fills dst (len = object size) from the best replica that works.
func (c *Client) read(ctx context.Context, key string, rl *ReplicaList, dst []byte) error {
	if len(rl.Replicas) == 0 {
		return kverr.New(kverr.ObjectNotFound, key, "no complete replica")
	}
	var errs error
	rs := c.ordered(rl.Replicas)
	for i, r := range rs {
		rctx, cancel := replicaCtx(ctx, rl, i < len(rs)-1)
		sum, err := c.readReplica(rctx, r, dst, rl.HasChecksum)
		if err != nil && rctx.Err() != nil && ctx.Err() == nil {
			c.stalled.Store(r.Endpoint, time.Now().Add(stallMemory).UnixNano())
		}
		cancel()
		if err == nil && rl.HasChecksum && sum != rl.CRC32C {
			err = kverr.New(kverr.ChecksumMismatch, key, "replica %s on %s: checksum mismatch", r.Type, r.Segment)
		}
		if err == nil {
			if time.Now().After(rl.LeaseDeadline) {
				return kverr.New(kverr.LeaseExpired, key, "read lease ended at %s during the transfer; query again", rl.LeaseDeadline.Format(time.RFC3339Nano))
			}
			return nil
		}
		errs = errors.Join(errs, err)
		if ctx.Err() != nil {
			break
		}
		if len(rl.Replicas) > 1 && time.Now().After(rl.LeaseDeadline) {
			// The other replicas' grants ended with the lease (a replica
			// whose box stopped answering held this read for IOTimeout):
			// they would refuse it. get queries again, with fresh grants.
			return kverr.New(kverr.LeaseExpired, key, "read lease ended at %s while a replica failed; query again: %v", rl.LeaseDeadline.Format(time.RFC3339Nano), errs)
		}
	}
	code := kverr.TransferFail
	switch {
	case kverr.Is(errs, kverr.ChecksumMismatch):
		code = kverr.ChecksumMismatch
	case kverr.Is(errs, kverr.PermissionDenied) && time.Now().After(rl.LeaseDeadline):
		// The replicas' read grants end with the lease: a refusal once it
		// ended is the lease running out during the transfer, not a
		// missing right.
		return kverr.New(kverr.LeaseExpired, key, "read lease ended at %s during the transfer; query again: %v", rl.LeaseDeadline.Format(time.RFC3339Nano), errs)
	}
	return kverr.New(code, key, "every replica failed: %v", errs)
}

// readReplica fills dst from r and, when sum is asked, returns the CRC32C of
// what it read: the transfer engine computes it while the bytes arrive (no
// second pass over dst).
func (c *Client) readReplica(ctx context.Context, r *kvtierpb.Replica, dst []byte, sum bool) (uint32, error) {
	if r.Length != uint64(len(dst)) {
		return 0, kverr.New(kverr.InternalError, "", "replica length %d differs from object size %d", r.Length, len(dst))
	}
	switch r.Type {
	case kvtierpb.ReplicaType_MEMORY, kvtierpb.ReplicaType_LOCAL_DISK:
		var crc uint32
		req := [1]transfer.Request{replicaRequest(transfer.Read, r, 0, dst)}
		if sum {
			req[0].Sum = &crc
		}
		err := c.engine.Do(ctx, req[:])[0]
		return crc, err
	case kvtierpb.ReplicaType_NOF:
		if err := c.readNOF(ctx, r, dst); err != nil {
			return 0, err
		}
		if sum {
			return Checksum(dst), nil
		}
		return 0, nil
	}
	return 0, kverr.New(kverr.InternalError, "", "unknown replica type %v", r.Type)
}

// Exist reports whether key is stored and readable. It never extends a lease.
func (c *Client) Exist(ctx context.Context, key string) (bool, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := c.master.Exist(rctx, &kvtierpb.KeyRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Key: []byte(key)})
	if err != nil {
		return false, kverr.FromGRPC(err)
	}
	return resp.Exists, nil
}

// Stat returns the object's metadata without taking a lease.
func (c *Client) Stat(ctx context.Context, key string) (*kvtierpb.ObjectInfo, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	info, err := c.master.GetObject(rctx, &kvtierpb.KeyRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Key: []byte(key)})
	return info, kverr.FromGRPC(err)
}

// Remove deletes key. A leased object is refused (OBJECT_HAS_LEASE) unless
// force; an object still being written is always refused.
func (c *Client) Remove(ctx context.Context, key string, force bool) error {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	c.leases.drop(key)
	c.hints.drop(key)
	_, err := c.master.Remove(rctx, &kvtierpb.KeyRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Key: []byte(key), Force: force})
	return kverr.FromGRPC(err)
}

// List returns up to limit objects whose key starts with prefix, after cursor.
func (c *Client) List(ctx context.Context, prefix, cursor string, limit int) ([]*kvtierpb.ObjectInfo, string, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := c.master.ListObjects(rctx, &kvtierpb.ListObjectsRequest{Tenant: c.cfg.Tenant, Prefix: []byte(prefix), Cursor: []byte(cursor), Limit: uint32(max(limit, 0))})
	if err != nil {
		return nil, "", kverr.FromGRPC(err)
	}
	return resp.Objects, string(resp.NextCursor), nil
}

// HintStats reports how many Gets kept the bytes they read speculatively
// from a remembered replica (hits) and how many read them again from the
// master's answer (misses); see Config.ReplicaHints.
func (c *Client) HintStats() (hits, misses uint64) {
	return c.hintHits.Load(), c.hintMisses.Load()
}
