package client

import (
	"context"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// What an importer outside this module can name. Go lets another module use
// values of types declared under internal/ but never spell their names, so
// every such type that appears in the client's exported API has an alias
// here (TestExportedAPINamesNoInternalType checks it). Error codes and the
// error type are in package kverr.

// TransferConfig tunes the transfer engine of a client that owns its engine
// (Config.Transfer): connections per peer, slice size, pipeline depth,
// in-flight bytes, timeouts, and DisableSharedMemory.
type TransferConfig = transfer.Config

// Engine is the transfer engine that moves a client's bytes. Only programs
// that serve segments through an engine they share with a client (the
// appliance) need to name it; see Config.Engine and Client.Engine.
type Engine = transfer.Engine

// ObjectInfo is an object's metadata (Stat, List).
type ObjectInfo = kvtierpb.ObjectInfo

// Replica is one location of an object (ReplicaList.Replicas).
type Replica = kvtierpb.Replica

// GetWith reads key's value into the buffer alloc returns for the object's
// size and returns the size. alloc may be called more than once (a retry
// after a failed speculative read) and must return a buffer of at least
// size bytes each time; the value is in the buffer of the last call. It is
// how a caller reads into memory it manages itself (a C or Python buffer
// sized after the fact) without an intermediate copy.
func (c *Client) GetWith(ctx context.Context, key string, alloc func(size uint64) ([]byte, error)) (int, error) {
	return c.get(ctx, key, func(size uint64) ([]byte, error) {
		b, err := alloc(size)
		if err != nil {
			return nil, err
		}
		if uint64(len(b)) < size {
			return nil, kverr.New(kverr.InvalidParams, key, "buffer of %d bytes is smaller than the object (%d bytes)", len(b), size)
		}
		return b[:size], nil
	})
}

// RemoveByRegex removes every object of the client's tenant whose key
// matches expr (Go regexp syntax) and returns how many it removed. Objects
// under lease are skipped unless force; objects still being written are
// always skipped.
func (c *Client) RemoveByRegex(ctx context.Context, expr string, force bool) (int, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	c.leases.clear()
	c.hints.clear()
	resp, err := c.master.RemoveByRegex(rctx, &kvtierpb.RemoveByRegexRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Regex: expr, Force: force})
	if err != nil {
		return 0, kverr.FromGRPC(err)
	}
	return int(resp.Count), nil
}

// RemoveAll removes every object of the client's tenant, with
// RemoveByRegex's rules, and returns how many it removed.
func (c *Client) RemoveAll(ctx context.Context, force bool) (int, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	c.leases.clear()
	c.hints.clear()
	resp, err := c.master.RemoveAll(rctx, &kvtierpb.RemoveAllRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Force: force})
	if err != nil {
		return 0, kverr.FromGRPC(err)
	}
	return int(resp.Count), nil
}

// clear drops every entry (after a removal by pattern, any key may be gone).
func (l *leaseCache) clear() {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.m)
}

// Endpoint returns the transfer address peers use to reach the segments this
// client serves ("" for a pure caller).
func (c *Client) Endpoint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endpoint
}
