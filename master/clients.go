package master

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// client is a node known to the master (it heartbeats or mounted a segment).
type client struct {
	id       string
	ssdName  string // "<id>/ssd": the segment name of its LOCAL_DISK replicas
	endpoint atomic.Pointer[string]
	hasSSD   atomic.Bool  // reported an SSD tier with capacity > 0
	state    atomic.Int32 // ClientState
	// awaitDram: the master waits for this node's DRAM directory report
	// (dramdir.go); awaitSince (guarded by mu) is when it started.
	awaitDram  atomic.Bool
	awaitSince int64

	mu       sync.Mutex
	lastBeat int64               // guarded by mu; unix ns
	disk     DiskStats           // guarded by mu
	nvme     *NVMeStats          // guarded by mu: last report (never mutated once stored)
	slots    int                 // guarded by mu
	segments map[string]struct{} // guarded by mu
	drained  map[string]struct{} // guarded by mu: names heartbeats must not remount
	ident    Identity            // guarded by mu: the incarnation holding the name (identity.go)
}

func (c *client) getEndpoint() string {
	if p := c.endpoint.Load(); p != nil {
		return *p
	}
	return ""
}

func (c *client) setEndpoint(e string) {
	if e != "" && e != c.getEndpoint() {
		c.endpoint.Store(&e)
	}
}

func (c *client) addSegment(name string) {
	c.mu.Lock()
	c.segments[name] = struct{}{}
	delete(c.drained, name)
	c.mu.Unlock()
}

func (c *client) removeSegment(name string) {
	c.mu.Lock()
	delete(c.segments, name)
	c.mu.Unlock()
}

func (c *client) markDrained(name string) {
	c.mu.Lock()
	c.drained[name] = struct{}{}
	c.mu.Unlock()
}

func (c *client) isDrained(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.drained[name]
	return ok
}

type clientTable struct {
	mu   sync.RWMutex
	byID map[string]*client // guarded by mu
}

func (t *clientTable) init() { t.byID = map[string]*client{} }

func (t *clientTable) get(id string) *client {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byID[id]
}

// getOrCreate returns the client, creating it LIVE with lastBeat now.
func (t *clientTable) getOrCreate(id, endpoint string, now int64) *client {
	if c := t.get(id); c != nil {
		c.setEndpoint(endpoint)
		return c
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.byID[id]; c != nil {
		return c
	}
	c := &client{id: id, ssdName: id + "/ssd", lastBeat: now, segments: map[string]struct{}{}, drained: map[string]struct{}{}}
	c.state.Store(int32(ClientLive))
	c.setEndpoint(endpoint)
	t.byID[id] = c
	return c
}

func (t *clientTable) list() []*client {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*client, 0, len(t.byID))
	for _, c := range t.byID {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *client) int { return cmp.Compare(a.id, b.id) })
	return out
}

// Heartbeat records a beat of req.Client: it becomes LIVE, its segments leave
// GRACE (and are remounted if the master had unmounted them), its SSD figures
// and NVMe/TCP figures are recorded (a beat without NVMe figures clears the
// last ones: the client no longer exports), and up to OffloadSlots offload
// tasks are handed out. The reply always carries the current SSD settings.
func (m *Master) Heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatReply, error) {
	if req.Client == "" {
		return HeartbeatReply{}, kverr.New(kverr.InvalidParams, "", "heartbeat: empty client id")
	}
	if req.OffloadSlots < 0 {
		return HeartbeatReply{}, kverr.New(kverr.InvalidParams, "", "heartbeat: negative offload slots")
	}
	if err := m.validCachedReads(req.CachedReads); err != nil {
		return HeartbeatReply{}, err
	}
	nvme := req.NVMe.clone() // copied outside the client lock
	now := m.now().UnixNano()
	old := m.clients.get(req.Client)
	known := old != nil
	if old != nil {
		if err := m.admit(old, req.Identity, req.Endpoint, now); err != nil {
			return HeartbeatReply{}, err
		}
	}
	c := m.clients.getOrCreate(m.intern(req.Client), req.Endpoint, now)
	_ = m.admit(c, req.Identity, req.Endpoint, now) // adopts the identity of a new client
	prev := ClientState(c.state.Swap(int32(ClientLive)))
	if prev == ClientGone {
		known = false
	}
	if req.DramDirectory {
		m.dram.ensure(c.id) // records are kept for it from now on
	}
	if req.DramDirectory && !known {
		m.awaitReport(c, now, req.DramObjects) // before the segments are re-announced below
	}
	c.mu.Lock()
	c.lastBeat = now
	c.slots = req.OffloadSlots
	if req.Disk != nil {
		c.disk = *req.Disk
		c.hasSSD.Store(req.Disk.Capacity > 0)
	}
	c.nvme = nvme
	c.mu.Unlock()
	if prev != ClientLive {
		m.setClientSegments(c, SegGrace, SegMounted)
		m.publish(Event{Kind: "client", Node: c.id, Message: "live (was " + prev.String() + ")"})
	}
	for _, s := range req.Segments {
		_ = m.mount(req.Client, s, false) // a conflicting re-announcement changes nothing
	}
	m.noteCachedReads(req.CachedReads)
	reply := HeartbeatReply{Known: known, Settings: m.settings.Load().ssd, ForgetDram: prev == ClientGone}
	if req.OffloadSlots > 0 {
		reply.Offload = m.dispatchOffload(c, req.OffloadSlots)
	}
	return reply, nil
}

// setClientSegments moves c's segments in state from to state to.
func (m *Master) setClientSegments(c *client, from, to SegmentState) {
	for _, s := range m.segs.all() {
		if s.owner == c {
			s.state.CompareAndSwap(int32(from), int32(to))
		}
	}
}

// checkClients applies the liveness rules: silent past ClientTTL → GRACE
// (segments take no new allocations, replicas kept); past TTL+grace → GONE.
func (m *Master) checkClients(ctx context.Context, now int64) {
	ttl, grace := int64(m.cfg.ClientTTL), int64(m.cfg.ClientGrace)
	for _, c := range m.clients.list() {
		c.mu.Lock()
		silent := now - c.lastBeat
		c.mu.Unlock()
		st := ClientState(c.state.Load())
		switch {
		case st == ClientGone:
		case silent > ttl+grace:
			m.clientGone(c)
		case silent > ttl && st == ClientLive:
			if c.state.CompareAndSwap(int32(ClientLive), int32(ClientGrace)) {
				m.setClientSegments(c, SegMounted, SegGrace)
				m.publish(Event{Kind: "client", Node: c.id, Message: "grace"})
			}
		}
	}
}

// clientGone unmounts c's segments, drops its LOCAL_DISK replicas, revokes
// its PROCESSING puts and forgets its offload tasks.
func (m *Master) clientGone(c *client) {
	c.state.Store(int32(ClientGone))
	c.hasSSD.Store(false)
	m.dram.forget(c.id)
	for _, s := range m.segs.all() {
		if s.owner == c {
			m.unmountNow(s, "owner gone")
		}
	}
	m.dropReplicas(func(r *replica) bool { return r.disk == c })
	for _, k := range m.offload.dropNode(c.id) {
		m.resetOffload(k)
	}
	m.forEachShard(func(sh *shard) {
		for k, o := range sh.inflight {
			if o.writer == c.id {
				m.revokeLocked(sh, k, o)
				m.ctr.add(cPutsRevoked, 1)
			}
		}
	})
	m.publish(Event{Kind: "client", Node: c.id, Message: "gone"})
}

// ListClients returns every known client.
func (m *Master) ListClients(ctx context.Context) []ClientInfo {
	var out []ClientInfo
	for _, c := range m.clients.list() {
		c.mu.Lock()
		ci := ClientInfo{ID: c.id, Endpoint: c.getEndpoint(), LastHeartbeat: time.Unix(0, c.lastBeat),
			State: ClientState(c.state.Load()), Disk: c.disk}
		nvme := c.nvme
		for s := range c.segments {
			ci.Segments = append(ci.Segments, s)
		}
		c.mu.Unlock()
		ci.NVMe = nvme.clone() // stored reports are immutable: copy outside the lock
		slices.Sort(ci.Segments)
		out = append(out, ci)
	}
	return out
}
