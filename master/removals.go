package master

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// DiskLocation is an object's place on an appliance's SSD tier.
type DiskLocation struct{ Bucket, Offset uint64 }

// DiskRemoval is one removal of LOCAL_DISK copies handed to an appliance
// (TakeRemovals): one key (every copy stored before the appliance records
// it), or a cutoff (every key of Tenant matching Pattern, RE2, "" = all,
// except the copies at Keep).
type DiskRemoval struct {
	Seq     uint64
	Tenant  string
	Key     string
	Cutoff  bool
	Pattern string
	Keep    []DiskLocation
}

// pendingRemoval is a DiskRemoval waiting for its appliance's
// acknowledgement (durable in its SSD tier's removals log).
type pendingRemoval struct {
	DiskRemoval
	match func(key string) bool // cutoff: compiled Pattern
	keep  map[DiskLocation]bool // cutoff: Keep, for lookups
	// sealed is false while RemoveAll/RemoveByRegex still scans (its keep
	// list is incomplete): it already stops offloads and registrations of
	// matching keys, but is not handed out. Guarded by removalOutbox.mu.
	sealed bool
	done   chan struct{} // closed when acknowledged
}

// kills reports whether r removes the copy of (tenant, key) at loc (an
// offload or a registration reporting it).
func (r *pendingRemoval) kills(tenant, key string, loc DiskLocation) bool {
	if r.Tenant != tenant {
		return false
	}
	if !r.Cutoff {
		return r.Key == key
	}
	return !r.keep[loc] && r.match(key)
}

// removalOutbox holds, per appliance, the removals it has not yet
// acknowledged. A Remove waits for the acknowledgement (see doc.go,
// "Removals"), so that a removal that returned success is durable where
// the copies are.
type removalOutbox struct {
	id uint64 // random per master start: acknowledgements name it

	mu     sync.Mutex
	next   uint64                   // guarded by mu: last seq handed out
	byNode map[string]*nodeRemovals // guarded by mu
}

type nodeRemovals struct {
	pending []*pendingRemoval // in seq order
	ready   chan struct{}     // closed (and replaced) when one is added or sealed
	// perKey counts the pending per-key removals of each tenant, and
	// wipe holds a pending cutoff of a tenant's every key (addGone).
	perKey map[string]int
	wipe   map[string]*pendingRemoval
}

func (q *removalOutbox) init() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	q.id = binary.LittleEndian.Uint64(b[:]) | 1 // never 0 ("nothing to acknowledge")
	q.byNode = map[string]*nodeRemovals{}
}

func (q *removalOutbox) nodeLocked(node string) *nodeRemovals {
	n := q.byNode[node]
	if n == nil {
		n = &nodeRemovals{ready: make(chan struct{}), perKey: map[string]int{}, wipe: map[string]*pendingRemoval{}}
		q.byNode[node] = n
	}
	return n
}

func (n *nodeRemovals) wake() {
	close(n.ready)
	n.ready = make(chan struct{})
}

// add queues r for node and returns it.
func (q *removalOutbox) add(node string, r *pendingRemoval) *pendingRemoval {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.next++
	r.Seq = q.next
	r.done = make(chan struct{})
	n := q.nodeLocked(node)
	n.pending = append(n.pending, r)
	if !r.Cutoff {
		n.perKey[r.Tenant]++
	}
	if r.sealed {
		n.wake()
	}
	return r
}

// forgetLocked updates n's counts for r leaving the queue.
func (n *nodeRemovals) forgetLocked(r *pendingRemoval) {
	if !r.Cutoff {
		n.perKey[r.Tenant]--
	} else if n.wipe[r.Tenant] == r {
		delete(n.wipe, r.Tenant)
	}
}

// seal makes r deliverable with its final keep list.
func (q *removalOutbox) seal(node string, r *pendingRemoval, keep []DiskLocation) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r.Keep = keep
	r.keep = make(map[DiskLocation]bool, len(keep))
	for _, l := range keep {
		r.keep[l] = true
	}
	r.sealed = true
	q.nodeLocked(node).wake()
}

// withdraw drops r, never handed out (unsealed), from node's outbox.
func (q *removalOutbox) withdraw(node string, r *pendingRemoval) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.byNode[node]; n != nil {
		n.pending = slices.DeleteFunc(n.pending, func(p *pendingRemoval) bool { return p == r })
		n.forgetLocked(r)
	}
	close(r.done)
}

// ack drops node's removals up to through, if outbox is this master's.
func (q *removalOutbox) ack(node string, outbox, through uint64) {
	if outbox != q.id || through == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.byNode[node]
	if n == nil {
		return
	}
	i := 0
	for ; i < len(n.pending) && n.pending[i].Seq <= through && n.pending[i].sealed; i++ {
		close(n.pending[i].done)
		n.forgetLocked(n.pending[i])
	}
	n.pending = slices.Delete(n.pending, 0, i)
}

// take returns up to limit sealed removals of node (in order, stopping at
// an unsealed one) and a channel closed when more may be available.
func (q *removalOutbox) take(node string, limit int) ([]DiskRemoval, <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.nodeLocked(node)
	var out []DiskRemoval
	for _, r := range n.pending {
		if !r.sealed || len(out) == limit {
			break
		}
		out = append(out, r.DiskRemoval)
	}
	return out, n.ready
}

// kills reports whether a removal node has not acknowledged removes the
// copy of (tenant, key) at loc. Called with the key's shard locked (lock
// order: shard, then outbox).
func (q *removalOutbox) kills(node, tenant, key string, loc DiskLocation) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.byNode[node]
	if n == nil {
		return false
	}
	for _, r := range n.pending {
		if r.kills(tenant, key, loc) {
			return true
		}
	}
	return false
}

// MaxTakeRemovals bounds the removals one TakeRemovals answer carries.
const MaxTakeRemovals = 4096

// TakeRemovals acknowledges the removals client made durable (those of
// outbox up to ackThrough), then returns the removals it has still to make,
// waiting up to wait for one, and the outbox they belong to.
func (m *Master) TakeRemovals(ctx context.Context, client string, outbox, ackThrough uint64, wait time.Duration) (uint64, []DiskRemoval, error) {
	switch {
	case client == "":
		return 0, nil, kverr.New(kverr.InvalidParams, "", "take removals: empty client id")
	case wait < 0 || wait > MaxTakeOffloadWait:
		return 0, nil, kverr.New(kverr.InvalidParams, "", "take removals: wait %v not in [0, %v]", wait, MaxTakeOffloadWait)
	}
	m.rmq.ack(client, outbox, ackThrough)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		out, ready := m.rmq.take(client, MaxTakeRemovals)
		if len(out) > 0 {
			return m.rmq.id, out, nil
		}
		select {
		case <-ready:
		case <-timer.C:
			return m.rmq.id, nil, nil
		case <-ctx.Done():
			return m.rmq.id, nil, nil
		}
	}
}

// awaitRemovals waits until every removal in rs is acknowledged, at most
// RemoveSyncTimeout (or until ctx ends). The objects are already gone from
// the master; an error says which appliances have not confirmed.
func (m *Master) awaitRemovals(ctx context.Context, key string, rs map[string]*pendingRemoval) error {
	if len(rs) == 0 || m.cfg.RemoveSyncTimeout < 0 {
		return nil
	}
	timer := time.NewTimer(m.cfg.RemoveSyncTimeout)
	defer timer.Stop()
	var late []string
	for node, r := range rs {
		select {
		case <-r.done:
			continue
		default:
		}
		if late != nil {
			late = append(late, node)
			continue
		}
		select {
		case <-r.done:
		case <-timer.C:
			late = append(late, node)
		case <-ctx.Done():
			late = append(late, node)
		}
	}
	if len(late) == 0 {
		return nil
	}
	slices.Sort(late)
	m.ctr.add(cRemovalsUnconfirmed, 1)
	return kverr.New(kverr.UnavailableInCurrentStatus, key,
		"removed from the master, but appliance %s has not confirmed deleting its SSD copy within %v "+
			"(queued: it deletes it when it next asks; until then a restart of the master could bring the object back)",
		strings.Join(late, ", "), m.cfg.RemoveSyncTimeout)
}

// queueDeleteLocked queues, for every appliance holding a LOCAL_DISK copy
// of o, the removal of key. The shard is locked, so an offload report of
// the key sees the removal pending.
func (m *Master) queueDeleteLocked(tenant, key string, o *object, into map[string]*pendingRemoval) map[string]*pendingRemoval {
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.typ != LocalDisk || r.disk == nil {
			continue
		}
		if into == nil {
			into = map[string]*pendingRemoval{}
		}
		if into[r.disk.id] == nil {
			into[r.disk.id] = m.rmq.add(r.disk.id, &pendingRemoval{DiskRemoval: DiskRemoval{Tenant: tenant, Key: key}, sealed: true})
		}
	}
	return into
}

// goneQueueCap bounds the per-key removals queued for one gone appliance;
// past it they collapse into one cutoff of the tenant's every key.
const goneQueueCap = 65536

// queueGoneLocked queues the removal of key for every gone appliance that
// had an SSD tier: the master dropped their replicas when they went, but
// their SSD may still hold a copy they would re-register when they come
// back. The same for an appliance still re-registering after a restart or
// a return (its SSD may hold a copy the master cannot name, such as an
// offload never reported: diskindex.go, "Restarts"). Nobody waits for
// these. Called with the key's shard locked.
func (m *Master) queueGoneLocked(tenant, key string, skip map[string]*pendingRemoval) {
	for _, c := range m.diskNodes() {
		if ClientState(c.state.Load()) != ClientGone && !c.isRegistering() || skip[c.id] != nil {
			continue
		}
		m.rmq.addGone(c.id, tenant, key)
	}
}

// addGone queues a per-key removal for a gone node, unless a queued cutoff
// of the whole tenant already covers it; past goneQueueCap the node's
// per-key removals of tenant collapse into one such cutoff.
func (q *removalOutbox) addGone(node, tenant, key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.nodeLocked(node)
	if n.wipe[tenant] != nil {
		return
	}
	r := &pendingRemoval{DiskRemoval: DiskRemoval{Tenant: tenant, Key: key}, sealed: true}
	if n.perKey[tenant] >= goneQueueCap {
		n.pending = slices.DeleteFunc(n.pending, func(p *pendingRemoval) bool {
			if p.Tenant == tenant && !p.Cutoff && p.sealed {
				close(p.done)
				n.forgetLocked(p)
				return true
			}
			return false
		})
		r = &pendingRemoval{DiskRemoval: DiskRemoval{Tenant: tenant, Cutoff: true}, sealed: true,
			match: func(string) bool { return true }, keep: map[DiskLocation]bool{}}
		n.wipe[tenant] = r
	} else {
		n.perKey[tenant]++
	}
	q.next++
	r.Seq = q.next
	r.done = make(chan struct{})
	n.pending = append(n.pending, r)
	n.wake()
}

// compileCutoff returns the matcher of a cutoff pattern.
func compileCutoff(pattern string) (func(string) bool, error) {
	if pattern == "" {
		return func(string) bool { return true }, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	return re.MatchString, nil
}

// diskNodes returns the clients that reported an SSD tier, gone ones
// included (a gone appliance that comes back must not re-register what a
// cutoff removed meanwhile).
func (m *Master) diskNodes() []*client {
	var out []*client
	for _, c := range m.clients.list() {
		c.mu.Lock()
		had := c.disk.Capacity > 0
		c.mu.Unlock()
		if had || c.hasSSD.Load() {
			out = append(out, c)
		}
	}
	return out
}

func (r DiskRemoval) String() string {
	if r.Cutoff {
		return fmt.Sprintf("cutoff %s/%q keep %d", r.Tenant, r.Pattern, len(r.Keep))
	}
	return fmt.Sprintf("delete %s/%q", r.Tenant, r.Key)
}
