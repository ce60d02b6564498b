package master

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
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
	interval atomic.Int64 // reported beat period in ns (0: unknown)
	storage  atomic.Bool  // has mounted a segment or reported an SSD tier
	// registering: the deadline (unix ns) of the re-registration of its
	// SSD copies after a restart or a return from GONE; 0 when none runs
	// (diskindex.go, "Restarts").
	registering atomic.Int64

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
	retired  []string            // guarded by mu: the last incarnations replaced by a restart (identity.go)
	// restarting (guarded by mu) is closed when the restart a contact of
	// the current incarnation began is done (nil: none runs); the
	// incarnation's other contacts wait for it (admit).
	restarting chan struct{}
	health     clientHealth // guarded by mu: what its last beat said of itself
}

// clientHealth is what a client's last beat said of itself.
type clientHealth struct {
	left      bool     // it is shutting down
	unhealthy []string // what it reports broken
}

// Bounds of a beat's unhealthy reasons (they are kept per client).
const (
	maxUnhealthy = 16
	maxReasonLen = 512
)

// SuspectBeats is how many beat periods of silence make a client that
// reports its period suspect (GRACE). 2.5 tolerates one lost or late beat
// and still shows a dead appliance within ~2.5 s at the default 1 s period.
const SuspectBeats = 2.5

// MinSuspectSilence is the least silence that makes a client suspect,
// whatever beat period it reports: a node beating every 100 ms must not be
// declared down by one GC pause or a scheduling hiccup of a loaded host.
const MinSuspectSilence = time.Second

// suspectAfter is how long c may stay silent before it is suspect: 2.5 of
// its beat periods when it reports one (at least MinSuspectSilence), never
// more than ttl.
func (c *client) suspectAfter(ttl int64) int64 {
	if iv := c.interval.Load(); iv > 0 {
		return min(ttl, max(int64(float64(iv)*SuspectBeats), int64(MinSuspectSilence)))
	}
	return ttl
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
	c.storage.Store(true)
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
	if req.Interval < 0 {
		return HeartbeatReply{}, kverr.New(kverr.InvalidParams, "", "heartbeat: negative interval")
	}
	if len(req.Unhealthy) > maxUnhealthy {
		return HeartbeatReply{}, kverr.New(kverr.InvalidParams, "", "heartbeat: %d unhealthy reasons, at most %d", len(req.Unhealthy), maxUnhealthy)
	}
	for _, r := range req.Unhealthy {
		if len(r) > maxReasonLen {
			return HeartbeatReply{}, kverr.New(kverr.InvalidParams, "", "heartbeat: an unhealthy reason of %d bytes, at most %d", len(r), maxReasonLen)
		}
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
	if ClientState(c.state.Load()) == ClientGone && c.hadSSD() {
		// Back from GONE: its copies were dropped, yet its SSD may hold
		// them; removals keep reaching it until it re-registered them.
		// Before it is LIVE again, so no Remove falls between.
		m.beginDiskRegistration(c)
	}
	prev := ClientState(c.state.Swap(int32(ClientLive)))
	if prev == ClientGone {
		known = false
	}
	if req.DramDirectory || len(req.Segments) > 0 || (req.Disk != nil && req.Disk.Capacity > 0) {
		m.holderSeen.Store(true) // see settling
	}
	if req.DramDirectory {
		m.dram.ensure(c.id) // records are kept for it from now on
	}
	if req.DramDirectory && !known {
		m.awaitReport(c, now, req.DramObjects) // before the segments are re-announced below
	}
	if req.Interval > 0 {
		c.interval.Store(int64(req.Interval))
	}
	c.mu.Lock()
	c.lastBeat = now
	if req.Leaving {
		// A goodbye carries no figures: keep the last ones listed (the
		// state says how old they are).
		req.OffloadSlots, req.Disk, nvme, req.Unhealthy = 0, &c.disk, c.nvme, c.health.unhealthy
	}
	c.slots = req.OffloadSlots
	if req.Disk != nil {
		c.disk = *req.Disk
		c.hasSSD.Store(req.Disk.Capacity > 0)
		if req.Disk.Capacity > 0 {
			c.storage.Store(true)
		}
	}
	c.nvme = nvme
	wasLeft := c.health.left
	c.health.left = req.Leaving
	changed := !slices.Equal(c.health.unhealthy, req.Unhealthy)
	if changed {
		c.health.unhealthy = slices.Clone(req.Unhealthy)
	}
	c.mu.Unlock()
	if changed {
		msg := "healthy again"
		if len(req.Unhealthy) > 0 {
			msg = "unhealthy: " + strings.Join(req.Unhealthy, "; ")
		}
		m.publish(Event{Kind: "client", Node: c.id, Message: msg})
	}
	if req.Leaving && !c.storage.Load() {
		// A pure caller saying goodbye is forgotten: it held no storage,
		// so there is nothing to suspect, and no row or event is left.
		m.forgetCaller(c)
		return HeartbeatReply{Known: known, Settings: m.settings.Load().ssd}, nil
	}
	if req.Leaving {
		// The node is shutting down: suspect it now rather than after the
		// silence, and take nothing else from this beat (no remount, no
		// offload tasks).
		c.state.Store(int32(ClientGrace))
		m.setClientSegments(c, SegMounted, SegGrace)
		if !wasLeft {
			m.publish(Event{Kind: "client", Node: c.id, Message: "left (shutting down): its replicas are not handed out until it returns"})
		}
		return HeartbeatReply{Known: known, Settings: m.settings.Load().ssd}, nil
	}
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

// checkClients applies the liveness rules: silent past suspectAfter (2.5
// beat periods, at most ClientTTL) → GRACE, "suspect" (segments take no new
// allocations, replicas kept but not handed out); past TTL+grace → GONE.
func (m *Master) checkClients(ctx context.Context, now int64) {
	ttl, grace := int64(m.cfg.ClientTTL), int64(m.cfg.ClientGrace)
	m.expireRegistrations(now)
	for _, c := range m.clients.list() {
		c.mu.Lock()
		silent := now - c.lastBeat
		c.mu.Unlock()
		st := ClientState(c.state.Load())
		switch {
		case st == ClientGone:
		case silent > ttl+grace:
			m.clientGone(c)
		case silent > c.suspectAfter(ttl) && st == ClientLive:
			if c.state.CompareAndSwap(int32(ClientLive), int32(ClientGrace)) {
				m.setClientSegments(c, SegMounted, SegGrace)
				m.publish(Event{Kind: "client", Node: c.id, Message: fmt.Sprintf(
					"grace: suspect, no heartbeat for %v; its replicas are not handed out; gone after %v of silence",
					time.Duration(silent).Round(100*time.Millisecond), time.Duration(ttl+grace))})
			}
		}
	}
}

// problemsLocked says why c is not healthy at now. c.mu must be held.
func (c *client) problemsLocked(now int64) []string {
	var out []string
	switch ClientState(c.state.Load()) {
	case ClientGrace:
		if c.health.left {
			out = append(out, "left (shut down)")
		} else {
			out = append(out, fmt.Sprintf("suspect: no heartbeat for %v", time.Duration(now-c.lastBeat).Round(100*time.Millisecond)))
		}
	case ClientGone:
		out = append(out, "gone")
	}
	return append(out, c.health.unhealthy...)
}

// hadSSD reports whether c ever reported an SSD tier.
func (c *client) hadSSD() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.disk.Capacity > 0 || c.hasSSD.Load()
}

// servable reports whether r may be handed to a reader: its storage is
// mounted and its node LIVE. A suspect node (GRACE) keeps its replicas, but
// handing them out would send readers to a box that may be dead.
func servable(r *replica) bool {
	if r.seg != nil {
		return !r.seg.removed.Load() && ClientState(r.seg.owner.state.Load()) == ClientLive
	}
	return r.disk == nil || ClientState(r.disk.state.Load()) == ClientLive && !r.unconfirmed
}

// clientGone unmounts c's segments, drops its LOCAL_DISK replicas, revokes
// its PROCESSING puts and forgets its offload tasks.
func (m *Master) clientGone(c *client) {
	before := m.nObjects.Load()
	c.state.Store(int32(ClientGone))
	c.hasSSD.Store(false)
	m.dram.forget(c.id)
	// Its grants die with its keys (the frees of its dropped replicas
	// reach no directory, so they revoke nothing): a node that comes back
	// gets new keys and clears its revocation table (grants.go).
	m.grantKeys.byNode.Delete(c.id)
	for _, s := range m.segs.all() {
		if s.owner == c {
			m.unmountNow(s, "owner gone")
		}
	}
	c.registering.Store(0) // gone: every copy of it is dropped below
	m.dropDisk(c, 0, dropGone)
	voided := m.offload.dropNode(c.id)
	for _, k := range voided {
		m.resetOffload(k)
	}
	m.reofferOffloads(voided)
	m.revokePutsOf(c.id)
	// Operators must see what a lost node took with it (puts running
	// meanwhile make the count approximate).
	msg := "gone: its segments are unmounted and its SSD replicas dropped"
	if lost := before - m.nObjects.Load(); lost > 0 {
		msg += fmt.Sprintf("; %d objects had no other replica and are lost", lost)
	}
	m.publish(Event{Kind: "client", Node: c.id, Message: msg})
}

// forgetCaller removes a client that never served storage from the table,
// revoking its puts still in flight (as GONE would, without the events).
func (m *Master) forgetCaller(c *client) {
	m.clients.mu.Lock()
	if m.clients.byID[c.id] == c {
		delete(m.clients.byID, c.id)
	}
	m.clients.mu.Unlock()
	c.state.Store(int32(ClientGone))
	m.revokePutsOf(c.id)
}

// ListClients returns every known client.
func (m *Master) ListClients(ctx context.Context) []ClientInfo {
	var out []ClientInfo
	now := m.now().UnixNano()
	for _, c := range m.clients.list() {
		c.mu.Lock()
		ci := ClientInfo{ID: c.id, Endpoint: c.getEndpoint(), LastHeartbeat: time.Unix(0, c.lastBeat),
			State: ClientState(c.state.Load()), Disk: c.disk, Problems: c.problemsLocked(now), Storage: c.storage.Load()}
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

// revokePutsOf revokes every put still in flight whose writer is id (a
// node that is gone, restarted or said goodbye will never end them).
func (m *Master) revokePutsOf(id string) {
	m.forEachShard(func(sh *shard) {
		for k, o := range sh.inflight {
			if o.writer == id {
				m.revokeLocked(sh, k, o)
				m.ctr.add(cPutsRevoked, 1)
			}
		}
	})
}
