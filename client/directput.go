package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// Direct puts (internal/transfer doc.go, "Direct puts"): where a put's
// bytes would cross a TCP socket anyway, the client sends key, checksum
// and bytes to an appliance's data port in one frame, and the appliance
// places the put with the master and commits it: one round trip instead
// of PutStart, the write and PutEnd one after another. Used for puts of
// one MEMORY replica and no NVMe-oF replica, of at most DirectPutMax
// bytes (a batch: every value), to an appliance whose
// segments announce direct_put, when the transfer engine would reach it
// over TCP (not the same process, not RDMA), or through shared memory for
// a single put of at most directOverShmMax bytes. A put the
// appliance answers "no room here" (NO_AVAILABLE_HANDLE), or that cannot
// go direct for any reason but a definite answer about the key, takes
// the classic path, unchanged.
//
// The client learns the appliances from ListSegments (cached, refreshed
// every directRefresh in the background) and holds one put ticket per
// appliance (PutTicket), renewed in the background at half its life.

// directOverShmMax is the largest single put a client on an appliance's
// host sends direct over TCP rather than through shared memory when the
// appliance places puts with a master in its own process (a standalone:
// Segment.direct_put_local), directOverShmRemote when its master is
// elsewhere. The shared-memory put is the classic one, two master calls
// around a copy, and for small values the calls cost more than the bytes
// crossing loopback. Measured against a standalone (kvtier bench
// --shm=true, old client and this one in turns, 2 s, two rounds), one /
// four callers: 4 KiB 7.2-7.8k / 14.5-17.2k puts/s through shared memory
// against 10.7-13.7k / 32.9-39.1k direct, 64 KiB 0.50-0.62 / 0.77-0.80
// GB/s against 0.56-0.68 / 1.10-1.26, 128 KiB 0.84-0.87 / 1.67-1.69
// against 1.12-1.20 / 2.20-2.24 (at the high watermark alike); at 256 KiB
// shared memory is ahead, at 1 MiB well ahead. Against an appliance whose
// master is another process the box stages the put and asks its master,
// and with four callers on two vCPUs that costs more than the classic
// path from 32 KiB on (32 KiB 7.1-7.6k against 8.8-9.5k puts/s, 128 KiB
// 0.75-0.90 against 0.83-1.09 GB/s), while at 16 KiB four callers are
// alike (7.9-9.7k against 8.2-9.6k) and one caller gains (5.3-6.2k
// against 3.5-4.4k). Batches stay on shared memory: their two calls are
// shared by every key (128 x 4 KiB measured alike either way).
const (
	directOverShmMax    = 128 << 10
	directOverShmRemote = 16 << 10
)

const (
	directRefresh = 3 * time.Second  // segment list refresh
	directBackoff = 30 * time.Second // after a failure to learn them
)

// directState is the client's view of where direct puts go.
type directState struct {
	rr atomic.Uint64 // round robin over the nodes

	mu sync.Mutex
	// guarded by mu:
	nodes      []directNode
	memNodes   []directNode // every node with a mounted MEMORY segment (one segment each)
	fetched    time.Time    // when nodes was learnt (zero: never)
	refreshing bool         // a background refresh of nodes runs
	offUntil   time.Time    // direct puts off until then (the master offers none)
	tickets    map[string]*directTicket
}

// directNode is one appliance taking direct puts.
type directNode struct {
	node, endpoint string
	segs           []string // its MEMORY segments
	offer          transfer.SegmentOffer
	free           uint64 // bytes free in its segments, as last listed
	local          bool   // it places puts with a master in its own process (direct_put_local)
}

type directTicket struct {
	tok        []byte
	renewAt    time.Time // half its life: renewed in the background from then
	lastUse    time.Time // three quarters: past it, a put waits for a new one
	expires    time.Time
	refreshing bool
}

// directTarget is where one direct put (or batch) goes.
type directTarget struct {
	node, endpoint string
	ticket         []byte
}

// directOK reports whether o allows a direct put.
func (c *Client) directOK(o PutOptions) bool {
	return !c.cfg.DisableDirectPut && o.Replicas <= 1 && o.NOFReplicas == 0
}

// directTarget picks the appliance for a put of size bytes: the owner of
// o.PreferredSegment, else round robin over those with room; one reached
// through shared memory only for a single put (single) small enough
// (directOverShmMax). ok false: use the classic path.
func (c *Client) directTarget(ctx context.Context, o PutOptions, size uint64, single bool) (directTarget, bool) {
	d := &c.direct
	nodes, _ := c.directNodes(ctx)
	if len(nodes) == 0 {
		return directTarget{}, false
	}
	var n *directNode
	if o.PreferredSegment != "" {
		for i := range nodes {
			for _, s := range nodes[i].segs {
				if s == o.PreferredSegment {
					n = &nodes[i]
				}
			}
		}
		if n == nil {
			return directTarget{}, false // not an appliance taking direct puts: the master decides
		}
	} else {
		start := int(d.rr.Add(1) % uint64(len(nodes)))
		for i := range nodes {
			x := &nodes[(start+i)%len(nodes)]
			if x.free >= size {
				n = x
				break
			}
		}
		if n == nil {
			return directTarget{}, false
		}
	}
	switch c.engine.Route(n.endpoint, n.segs[0], n.offer) {
	case "tcp":
	case "shm":
		limit := uint64(directOverShmRemote)
		if n.local {
			limit = directOverShmMax
		}
		if !single || size > limit {
			return directTarget{}, false // the classic path's calls cost less than the bytes' trip
		}
	default:
		return directTarget{}, false // the same process, or RDMA: no socket round trip to save
	}
	tok, ok := c.directTicket(ctx, n.node)
	if !ok {
		return directTarget{}, false
	}
	return directTarget{node: n.node, endpoint: n.endpoint, ticket: tok}, true
}

// directNodes returns the appliances taking direct puts, and every node
// with a MEMORY segment, as last listed (none while direct puts are off
// after a failure to learn them). The first call waits for the list;
// later ones refresh it in the background every directRefresh.
func (c *Client) directNodes(ctx context.Context) (direct, mem []directNode) {
	d := &c.direct
	now := time.Now()
	d.mu.Lock()
	if now.Before(d.offUntil) {
		d.mu.Unlock()
		return nil, nil
	}
	if d.fetched.IsZero() {
		d.mu.Unlock()
		c.refreshDirect(ctx) // the first put waits for the list once
		d.mu.Lock()
	} else if now.Sub(d.fetched) > directRefresh && !d.refreshing {
		d.refreshing = true
		go c.refreshDirect(context.Background())
	}
	direct, mem = d.nodes, d.memNodes
	d.mu.Unlock()
	return direct, mem
}

// refreshDirect lists the segments and keeps the appliances that take
// direct puts.
func (c *Client) refreshDirect(ctx context.Context) {
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.ListSegments(rctx, &kvtierpb.Empty{})
	cancel()
	d := &c.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refreshing = false
	d.fetched = time.Now()
	if err != nil {
		c.cfg.Logger.Debug("direct puts: cannot list segments; classic puts for now", "err", kverr.FromGRPC(err))
		d.offUntil = time.Now().Add(directBackoff)
		return
	}
	var nodes, all []directNode
	idx, allIdx := map[string]int{}, map[string]bool{}
	for _, si := range resp.GetSegments() {
		s := si.GetSegment()
		if s.GetType() != kvtierpb.ReplicaType_MEMORY || si.GetState() != kvtierpb.SegmentState_MOUNTED {
			continue
		}
		offer := transfer.SegmentOffer{RDMAAddr: s.GetRdmaAddr(), RDMABase: s.GetRdmaBase(), RDMAKey: s.GetRdmaRkey(),
			RDMAFreesBase: s.GetRdmaFreesBase(), RDMAFreesKey: s.GetRdmaFreesRkey()}
		if !allIdx[s.GetNode()] {
			allIdx[s.GetNode()] = true
			all = append(all, directNode{node: s.GetNode(), endpoint: s.GetEndpoint(), segs: []string{s.GetName()}, offer: offer})
		}
		if !s.GetDirectPut() {
			continue
		}
		i, ok := idx[s.GetNode()]
		if !ok {
			i = len(nodes)
			idx[s.GetNode()] = i
			nodes = append(nodes, directNode{node: s.GetNode(), endpoint: s.GetEndpoint(), offer: offer, local: s.GetDirectPutLocal()})
		}
		nodes[i].segs = append(nodes[i].segs, s.GetName())
		if s.GetSize() > si.GetUsed() {
			nodes[i].free += s.GetSize() - si.GetUsed()
		}
	}
	d.nodes, d.memNodes = nodes, all
}

// directTicket returns node's put ticket, asking the master for one when
// there is none or it is about to expire, renewing it in the background
// from half its life.
func (c *Client) directTicket(ctx context.Context, node string) ([]byte, bool) {
	d := &c.direct
	now := time.Now()
	d.mu.Lock()
	t := d.tickets[node]
	switch {
	case t != nil && now.Before(t.renewAt):
		d.mu.Unlock()
		return t.tok, true
	case t != nil && now.Before(t.lastUse):
		if !t.refreshing {
			t.refreshing = true
			go c.fetchTicket(context.Background(), node)
		}
		d.mu.Unlock()
		return t.tok, true
	}
	d.mu.Unlock()
	c.fetchTicket(ctx, node)
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.tickets[node]; t != nil && time.Now().Before(t.expires) {
		return t.tok, true
	}
	return nil, false
}

func (c *Client) fetchTicket(ctx context.Context, node string) {
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.PutTicket(rctx, &kvtierpb.PutTicketRequest{ClientId: c.cfg.ClientID, Tenant: c.cfg.Tenant, Node: node})
	cancel()
	d := &c.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tickets == nil {
		d.tickets = map[string]*directTicket{}
	}
	if err != nil {
		c.cfg.Logger.Debug("direct puts: no put ticket; classic puts for now", "node", node, "err", kverr.FromGRPC(err))
		delete(d.tickets, node)
		d.offUntil = time.Now().Add(directBackoff)
		return
	}
	now := time.Now()
	if resp.GetOpen() { // no grants: the identity is declared, and never expires
		d.tickets[node] = &directTicket{tok: grant.UnsignedTicket(node, c.cfg.Tenant, c.cfg.ClientID),
			renewAt: now.Add(time.Hour), lastUse: now.Add(2 * time.Hour), expires: now.Add(100 * 365 * 24 * time.Hour)}
		return
	}
	exp := time.UnixMilli(resp.GetExpiryMs())
	life := exp.Sub(now)
	d.tickets[node] = &directTicket{tok: resp.GetTicket(), renewAt: now.Add(life / 2), lastUse: now.Add(life * 3 / 4), expires: exp}
}

// dropTicket forgets node's ticket (refused: the node got new keys).
func (c *Client) dropTicket(node string) {
	c.direct.mu.Lock()
	delete(c.direct.tickets, node)
	c.direct.mu.Unlock()
}

// directPuts builds the frame entries of values under keys with o.
func directPuts(keys []string, values [][]byte, o PutOptions) []transfer.DirectPut {
	out := make([]transfer.DirectPut, len(keys))
	for i, k := range keys {
		out[i] = transfer.DirectPut{Key: k, Size: uint64(len(values[i])), CRC32C: Checksum(values[i]),
			SoftPin: o.SoftPin, HardPin: o.HardPin, SoftPinTTL: o.SoftPinTTL, PreferredSegment: o.PreferredSegment}
	}
	return out
}

// sendDirect sends one frame. classic reports that the whole frame should
// take the classic path instead (no definite answer about any key).
func (c *Client) sendDirect(ctx context.Context, t directTarget, puts []transfer.DirectPut, values [][]byte) (errs []error, classic bool, err error) {
	errs, err = c.engine.PutDirect(ctx, t.endpoint, t.ticket, puts, values)
	if err == nil {
		return errs, false, nil
	}
	switch kverr.CodeOf(err) {
	case kverr.InvalidParams:
		return nil, false, err // the put itself is bad: the classic path would say the same
	case kverr.PermissionDenied:
		// The ticket no longer verifies there (the node restarted with new
		// keys): a new one next time; this put goes the classic way, which
		// the master authorizes itself.
		c.dropTicket(t.node)
	}
	c.cfg.Logger.Debug("direct put failed; classic path", "node", t.node, "err", err)
	return nil, true, nil
}

// putDirect tries key as a direct put. done false: take the classic path.
func (c *Client) putDirect(ctx context.Context, key string, value []byte, o PutOptions) (_ PutResult, _ error, done bool) {
	if !c.directOK(o) || len(value) > c.cfg.DirectPutMax || len(key) > transfer.MaxDirectPutKey {
		return PutResult{}, nil, false
	}
	t, ok := c.directTarget(ctx, o, uint64(len(value)), true)
	if !ok {
		return PutResult{}, nil, false
	}
	keys, values := []string{key}, [][]byte{value}
	errs, classic, err := c.sendDirect(ctx, t, directPuts(keys, values, o), values)
	switch {
	case classic:
		return PutResult{}, nil, false
	case err != nil:
		return PutResult{}, err, true
	case errs[0] == nil:
		return PutResult{Replicas: 1}, nil, true
	case kverr.Is(errs[0], kverr.ObjectAlreadyExists):
		r, err := c.alreadyStored(ctx, key, uint64(len(value)), errs[0])
		return r, err, true
	case retryClassic(errs[0]):
		return PutResult{}, nil, false // no room there: the master may place it elsewhere
	}
	return PutResult{}, errs[0], true
}

// batchPutDirect puts what it can of keys directly, filling errs, and
// returns the indexes left for the classic path.
func (c *Client) batchPutDirect(ctx context.Context, keys []string, values [][]byte, o PutOptions, errs []error) []int {
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	if !c.directOK(o) {
		return all
	}
	var total uint64
	for i, v := range values {
		if len(v) > c.cfg.DirectPutMax {
			return all // large values: the classic path's sliced writes
		}
		if len(keys[i]) > transfer.MaxDirectPutKey {
			return all // a key longer than a frame takes: the master decides
		}
		total += uint64(len(v))
	}
	t, ok := c.directTarget(ctx, o, total, false)
	if !ok {
		return all
	}
	puts := directPuts(keys, values, o)
	var rest []int
	for lo := 0; lo < len(keys); {
		// Frames of at most MaxDirectPuts puts and 64 MiB.
		hi, bytes := lo, uint64(0)
		for hi < len(keys) && hi-lo < transfer.MaxDirectPuts && (hi == lo || bytes+puts[hi].Size <= transfer.MaxFrameLength) {
			bytes += puts[hi].Size
			hi++
		}
		if bytes > transfer.MaxFrameLength { // one value above a frame: classic
			rest = append(rest, lo)
			lo = hi
			continue
		}
		res, classic, err := c.sendDirect(ctx, t, puts[lo:hi], values[lo:hi])
		for i := lo; i < hi; i++ {
			switch {
			case classic:
				rest = append(rest, i)
			case err != nil:
				errs[i] = err
			case res[i-lo] == nil:
			case kverr.Is(res[i-lo], kverr.ObjectAlreadyExists):
				errs[i] = res[i-lo]
				if _, e := c.alreadyStored(ctx, keys[i], uint64(len(values[i])), res[i-lo]); e == nil {
					errs[i] = nil
				}
			case retryClassic(res[i-lo]):
				rest = append(rest, i)
			default:
				errs[i] = res[i-lo]
			}
		}
		lo = hi
	}
	return rest
}

// retryClassic reports a direct put's result that says nothing final about
// the key, so the classic path may place it: no room on that appliance
// (NO_AVAILABLE_HANDLE), the appliance or its master not taking puts now
// (UNAVAILABLE_IN_CURRENT_STATUS, NOT_LEADER), or the appliance's call to
// the master failed (RPC_FAIL, INTERNAL_ERROR; it revoked the put).
func retryClassic(err error) bool {
	switch kverr.CodeOf(err) {
	case kverr.NoAvailableHandle, kverr.UnavailableInCurrentStatus, kverr.NotLeader, kverr.RPCFail, kverr.InternalError:
		return true
	}
	return false
}
