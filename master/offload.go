package master

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// offloadQueue holds offload tasks: queued per node (FIFO, bounded) until a
// heartbeat with free slots takes them, then outstanding until OffloadDone or
// the offload timeout. Lock order: a shard lock may be held when taking mu,
// never the reverse.
type offloadQueue struct {
	mu          sync.Mutex
	limit       int
	queued      map[string]string        // guarded by mu: composite key → node
	fifo        map[string]*keyFIFO      // guarded by mu: node → composite keys (stale entries skipped)
	outstanding map[string]outTask       // guarded by mu: composite key → task
	wake        map[string]chan struct{} // guarded by mu: node → closed at its next enqueue (TakeOffload waiters)
	progressed  chan struct{}            // guarded by mu: closed at the next OffloadDone; nil while nobody waits
	lastTake    atomic.Int64             // unix ns of the latest TakeOffload call (appliances poll)

	failMu    sync.Mutex
	failLast  map[string]int64 // guarded by failMu: node → unix ns of its last failure event
	failQuiet map[string]int   // guarded by failMu: node → failures not evented since
}

// offloadFailEvery is the least time between two offload-failure events of
// one node: a full disk fails every offload, and one event a second with
// the count says as much as thousands.
const offloadFailEvery = int64(time.Second)

// failEvent reports whether a failure of node at now gets its own event,
// and how many failures were left out since the last one.
func (q *offloadQueue) failEvent(node string, now int64) (publish bool, quiet int) {
	q.failMu.Lock()
	defer q.failMu.Unlock()
	if q.failLast == nil {
		q.failLast, q.failQuiet = map[string]int64{}, map[string]int{}
	}
	if last, ok := q.failLast[node]; ok && now-last < offloadFailEvery {
		q.failQuiet[node]++
		return false, 0
	}
	q.failLast[node] = now
	quiet = q.failQuiet[node]
	delete(q.failQuiet, node)
	return true, quiet
}

// keyFIFO is one node's queued keys, oldest first from head. pop advances
// head instead of copying the rest of the slice: with tens of thousands of
// 4 KiB objects queued, copying the remainder at every TakeOffload was 18 %
// of a standalone's CPU (and most of its garbage) at the watermark.
type keyFIFO struct {
	keys []string
	head int
}

type outTask struct {
	node string
	at   int64 // dispatch time, unix ns
}

func (q *offloadQueue) init(limit int) {
	q.limit = limit
	q.queued = map[string]string{}
	q.fifo = map[string]*keyFIFO{}
	q.outstanding = map[string]outTask{}
	q.wake = map[string]chan struct{}{}
}

// progress returns a channel closed at the next OffloadDone.
func (q *offloadQueue) progress() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.progressed == nil {
		q.progressed = make(chan struct{})
	}
	return q.progressed
}

// noteProgress wakes the waiters of progress.
func (q *offloadQueue) noteProgress() {
	q.mu.Lock()
	if q.progressed != nil {
		close(q.progressed)
		q.progressed = nil
	}
	q.mu.Unlock()
}

// enqueue queues c for node; false when the queue is full.
func (q *offloadQueue) enqueue(node, c string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.queued[c]; ok {
		return true
	}
	if len(q.queued) >= q.limit {
		return false
	}
	q.queued[c] = node
	f := q.fifo[node]
	if f == nil {
		f = &keyFIFO{}
		q.fifo[node] = f
	}
	f.keys = append(f.keys, c)
	if ch := q.wake[node]; ch != nil {
		close(ch)
		delete(q.wake, node)
	}
	return true
}

// ready returns a channel that is closed once node has queued tasks: at
// once when it has some now, else at its next enqueue.
func (q *offloadQueue) ready(node string) <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if f := q.fifo[node]; f != nil && f.head < len(f.keys) {
		return closedChan
	}
	ch := q.wake[node]
	if ch == nil {
		ch = make(chan struct{})
		q.wake[node] = ch
	}
	return ch
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// pop takes up to n queued keys of node, oldest first.
func (q *offloadQueue) pop(node string, n int) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.fifo[node]
	if f == nil {
		return nil
	}
	var out []string
	i := f.head
	for ; i < len(f.keys) && len(out) < n; i++ {
		if k := f.keys[i]; q.queued[k] == node {
			delete(q.queued, k)
			out = append(out, k)
		}
	}
	clear(f.keys[f.head:i]) // the strings, for the collector
	f.head = i
	switch {
	case f.head == len(f.keys):
		delete(q.fifo, node)
	case f.head >= 4096 && f.head >= len(f.keys)/2:
		// Compact once the consumed head is most of the slice: each key is
		// copied O(1) times on average.
		left := copy(f.keys, f.keys[f.head:])
		clear(f.keys[left:])
		f.keys, f.head = f.keys[:left], 0
	}
	return out
}

func (q *offloadQueue) unqueue(c string) {
	q.mu.Lock()
	delete(q.queued, c)
	q.mu.Unlock()
}

func (q *offloadQueue) markOutstanding(c, node string, now int64) {
	q.mu.Lock()
	q.outstanding[c] = outTask{node, now}
	q.mu.Unlock()
}

func (q *offloadQueue) forget(c string) {
	q.mu.Lock()
	delete(q.outstanding, c)
	delete(q.queued, c)
	q.mu.Unlock()
}

func (q *offloadQueue) nodeOf(c string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.outstanding[c].node
}

// outstandingMatching returns the composite keys of the dispatched tasks
// that match accepts.
func (q *offloadQueue) outstandingMatching(match func(ck string) bool) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for c := range q.outstanding {
		if match(c) {
			out = append(out, c)
		}
	}
	return out
}

// stillOutstanding returns those of cs whose tasks are still dispatched
// (in cs's storage).
func (q *offloadQueue) stillOutstanding(cs []string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.DeleteFunc(cs, func(c string) bool {
		_, ok := q.outstanding[c]
		return !ok
	})
}

// depth returns queued and outstanding task counts.
func (q *offloadQueue) depth() (queued, outstanding int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queued), len(q.outstanding)
}

// dropNode forgets every task of node and returns their keys.
func (q *offloadQueue) dropNode(node string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for c, n := range q.queued {
		if n == node {
			delete(q.queued, c)
			out = append(out, c)
		}
	}
	delete(q.fifo, node)
	for c, t := range q.outstanding {
		if t.node == node {
			delete(q.outstanding, c)
			out = append(out, c)
		}
	}
	return out
}

// expired removes and returns outstanding tasks dispatched before deadline.
func (q *offloadQueue) expired(deadline int64) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for c, t := range q.outstanding {
		if t.at <= deadline {
			delete(q.outstanding, c)
			out = append(out, c)
		}
	}
	return out
}

// offloadSource returns the first COMPLETE MEMORY replica whose node has an
// SSD tier, or nil.
func offloadSource(o *object) *replica {
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.typ == Memory && r.state == Complete && r.seg.owner.hasSSD.Load() &&
			ClientState(r.seg.owner.state.Load()) == ClientLive {
			return r
		}
	}
	return nil
}

func hasDiskCopy(o *object) bool {
	for i := range o.replicas {
		if o.replicas[i].typ == LocalDisk && o.replicas[i].state == Complete && !o.replicas[i].unconfirmed {
			return true
		}
	}
	return false
}

// queueOffloadLocked queues an offload of o. It reports whether a task is
// now pending, and whether the queue was full. sh.mu must be held.
func (m *Master) queueOffloadLocked(c string, o *object) (pending, full bool) {
	if o.offload != offloadNone {
		return true, false
	}
	src := offloadSource(o)
	if src == nil {
		return false, false
	}
	if !m.offload.enqueue(src.seg.owner.id, c) {
		m.ctr.add(cOffloadsSkippedQueueFull, 1)
		return false, true
	}
	o.offload = offloadQueued
	m.ctr.add(cOffloadsQueued, 1)
	return true, false
}

// dispatchOffload hands up to slots queued tasks to node c.
func (m *Master) dispatchOffload(c *client, slots int) []OffloadTask {
	keys := m.offload.pop(c.id, slots)
	var out []OffloadTask
	now := m.now().UnixNano()
	for _, k := range keys {
		sh := m.shardOf(k)
		sh.mu.Lock()
		o := sh.objs[k]
		if o == nil || o.offload != offloadQueued {
			sh.mu.Unlock()
			continue
		}
		var src *replica
		for i := range o.replicas {
			r := &o.replicas[i]
			if r.typ == Memory && r.state == Complete && r.seg.owner == c {
				src = r
				break
			}
		}
		if src == nil || !o.complete {
			o.offload = offloadNone
			sh.mu.Unlock()
			continue
		}
		o.offload = offloadDispatched
		m.offload.markOutstanding(k, c.id, now)
		t, key := splitCK(k)
		out = append(out, OffloadTask{Tenant: t, Key: key, Size: o.size, CRC32C: o.crc, Source: m.publicReplica(src)})
		sh.mu.Unlock()
	}
	return out
}

// MaxTakeOffloadWait bounds how long one TakeOffload call waits for a
// first task, and MaxTakeOffloadSlots how many tasks it asks for.
const (
	MaxTakeOffloadWait  = 5 * time.Second
	MaxTakeOffloadSlots = 65536
)

// TakeOffload hands up to slots queued offload tasks to client, waiting up
// to wait for a first one to be queued (no tasks and no error when the
// wait ends first, or ctx ends). It is the heartbeat's dispatch without the
// heartbeat's delay: an appliance calls it again whenever it has free
// slots, so a put's offload starts as soon as its PutEnd queued it.
func (m *Master) TakeOffload(ctx context.Context, client string, slots int, wait time.Duration) ([]OffloadTask, error) {
	switch {
	case client == "":
		return nil, kverr.New(kverr.InvalidParams, "", "take offload: empty client id")
	case slots < 1 || slots > MaxTakeOffloadSlots:
		return nil, kverr.New(kverr.InvalidParams, "", "take offload: slots %d not in 1..%d", slots, MaxTakeOffloadSlots)
	case wait <= 0 || wait > MaxTakeOffloadWait:
		return nil, kverr.New(kverr.InvalidParams, "", "take offload: wait %v not in (0, %v]", wait, MaxTakeOffloadWait)
	}
	c := m.clients.get(client)
	if c == nil || ClientState(c.state.Load()) == ClientGone {
		return nil, kverr.New(kverr.ClientNotFound, "", "take offload: client %q is not known (heartbeat first)", client)
	}
	m.offload.lastTake.Store(time.Now().UnixNano())
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if out := m.dispatchOffload(c, slots); len(out) > 0 {
			return out, nil
		}
		// Every queued entry was stale (dispatchOffload skipped it), or
		// there was none: wait for the next enqueue.
		select {
		case <-m.offload.ready(c.id):
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// offloadsMoving reports whether an offload may land soon: one is
// dispatched, or one is queued while appliances poll with TakeOffload
// (they take it within milliseconds; a queued task waiting for a heartbeat
// would not land within a put's wait).
func (m *Master) offloadsMoving() bool {
	queued, outstanding := m.offload.depth()
	polling := time.Since(time.Unix(0, m.offload.lastTake.Load())) < 2*MaxTakeOffloadWait
	return outstanding > 0 || queued > 0 && polling
}

// reapOffloads fails dispatched tasks older than the offload timeout.
func (m *Master) reapOffloads(now int64) {
	for _, k := range m.offload.expired(now - int64(m.cfg.OffloadTimeout)) {
		m.ctr.add(cOffloadsFailed, 1)
		m.resetOffload(k)
		m.markOffloadFailed(k)
	}
}

// markOffloadFailed lets eviction free k's MEMORY without a disk copy.
func (m *Master) markOffloadFailed(k string) {
	sh := m.shardOf(k)
	sh.mu.Lock()
	if o := sh.objs[k]; o != nil {
		o.flags |= flagOffloadFailed
	}
	sh.mu.Unlock()
}

// resetOffloadAfterRestart ends k's offload task of node c, whose process
// restarted (disk: it has an SSD tier). A task it had taken may have left a
// durable copy it never reported: the object gets an unconfirmed
// placeholder replica on c until c's re-registration says (diskindex.go,
// "Restarts").
func (m *Master) resetOffloadAfterRestart(k string, c *client, disk bool) {
	defer m.offload.noteProgress() // after the shard lock: a waiting Remove or PutStart looks again
	sh := m.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[k]
	if o == nil {
		return
	}
	if disk && o.offload == offloadDispatched && o.complete &&
		!slices.ContainsFunc(o.replicas, func(r replica) bool { return r.typ == LocalDisk && r.disk == c }) {
		o.replicas = append(o.replicas, replica{disk: c, bucket: noBucket, length: o.size, typ: LocalDisk, state: Complete, unconfirmed: true})
		indexDiskLocked(sh, canonicalKeyLocked(sh, k, o), c, noBucket)
	}
	o.offload = offloadNone
}

// reofferOffloads queues again, with offload "immediate", the offloads of
// keys whose task a lost or restarted node will never finish, from another
// node's MEMORY replica: otherwise such an object would hold no SSD copy
// until eviction offered it again, though "immediate" promises one.
func (m *Master) reofferOffloads(keys []string) {
	if m.settings.Load().ssd.OffloadMode != OffloadImmediate {
		return
	}
	for _, k := range keys {
		sh := m.shardOf(k)
		sh.mu.Lock()
		if o := sh.objs[k]; o != nil && o.complete && o.offload == offloadNone && !hasDiskCopy(o) {
			m.queueOffloadLocked(k, o)
		}
		sh.mu.Unlock()
	}
}

func (m *Master) resetOffload(k string) {
	defer m.offload.noteProgress() // after the shard lock: a waiting Remove or PutStart looks again
	sh := m.shardOf(k)
	sh.mu.Lock()
	if o := sh.objs[k]; o != nil {
		o.offload = offloadNone
	}
	sh.mu.Unlock()
}

// OffloadDone records the end of an offload task. On success the object
// gains a COMPLETE LOCAL_DISK replica on the reporting node; either way the
// pin on its MEMORY replica is released.
func (m *Master) OffloadDone(ctx context.Context, res OffloadResult) error {
	t, k, err := m.checkKey(res.Tenant, res.Key)
	if err != nil {
		return err
	}
	defer m.offload.noteProgress() // after the shard lock: a waiting PutStart may now evict
	c := m.clients.get(res.Client)
	if c == nil {
		return kverr.New(kverr.ClientNotFound, res.Key, "offload done from unknown client %q", res.Client)
	}
	sh := m.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return m.offloadDoneLocked(sh, c, t, k, &res)
}

// MaxOffloadBatch is the most results one BatchOffloadDone may carry.
const MaxOffloadBatch = 65536

// BatchOffloadDone is OffloadDone for many results of one client, one
// error per result in order (nil: recorded), each result judged exactly as
// OffloadDone judges it alone: one refused as bad input (unknown key, a
// length that is not the object's size, a task of another node) changes
// nothing; a copy a pending removal will delete is refused and releases
// the object's offload pin (counted failed). The results are applied shard by shard,
// each shard's lock taken once, and waiting puts are woken once: reporting
// 4 KiB offloads one call each capped puts into full DRAM at the rate of
// those calls (2.2k keys/s with --offload immediate). The call itself fails
// only for an unknown client or a batch too large.
func (m *Master) BatchOffloadDone(ctx context.Context, clientID string, res []OffloadResult) ([]error, error) {
	if len(res) > MaxOffloadBatch {
		return nil, kverr.New(kverr.InvalidParams, "", "batch offload done: %d results, at most %d", len(res), MaxOffloadBatch)
	}
	c := m.clients.get(clientID)
	if c == nil {
		return nil, kverr.New(kverr.ClientNotFound, "", "offload done from unknown client %q", clientID)
	}
	errs := make([]error, len(res))
	type item struct {
		i     int
		shard uint32
		t, k  string
	}
	items := make([]item, 0, len(res))
	for i := range res {
		if res[i].Client != "" && res[i].Client != clientID {
			errs[i] = kverr.New(kverr.IllegalClient, res[i].Key, "result of client %q in a batch of %q", res[i].Client, clientID)
			continue
		}
		t, k, err := m.checkKey(res[i].Tenant, res[i].Key)
		if err != nil {
			errs[i] = err
			continue
		}
		items = append(items, item{i: i, shard: m.shardIndex(k), t: t, k: k})
	}
	if len(items) == 0 {
		return errs, nil
	}
	defer m.offload.noteProgress() // after the shard locks: waiting PutStarts may now evict
	// By shard, and in report order within a shard (stable): two results
	// of one key apply in the order the appliance sent them.
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.shard, b.shard) })
	for lo := 0; lo < len(items); {
		hi := lo + 1
		for hi < len(items) && items[hi].shard == items[lo].shard {
			hi++
		}
		sh := &m.shards[items[lo].shard]
		sh.mu.Lock()
		for _, it := range items[lo:hi] {
			errs[it.i] = m.offloadDoneLocked(sh, c, it.t, it.k, &res[it.i])
		}
		sh.mu.Unlock()
		lo = hi
	}
	return errs, nil
}

// offloadDoneLocked applies one offload result of client c for the object
// under composite key k (tenant t). sh (k's shard) must be locked.
func (m *Master) offloadDoneLocked(sh *shard, c *client, t, k string, res *OffloadResult) error {
	o := sh.objs[k]
	if o == nil {
		m.offload.forget(k)
		return kverr.New(kverr.ObjectNotFound, res.Key, "object no longer exists")
	}
	if node := m.offload.nodeOf(k); node != "" && node != c.id {
		return kverr.New(kverr.IllegalClient, res.Key, "offload task belongs to %s, not %s", node, c.id)
	}
	if res.OK && res.Length != o.size {
		return kverr.New(kverr.InvalidParams, res.Key, "disk length %d differs from object size %d", res.Length, o.size)
	}
	if res.OK && res.Bucket == noBucket {
		return kverr.New(kverr.InvalidParams, res.Key, "bucket %d is not a bucket id", res.Bucket)
	}
	if o.offload == offloadDispatched {
		m.offload.forget(k)
		o.offload = offloadNone
	}
	if !res.OK {
		if res.Retry {
			return nil // skipped: the object waits for a later offer
		}
		m.ctr.add(cOffloadsFailed, 1)
		// Not offered again: eviction frees its DRAM without a disk copy
		// rather than keep it for an offload that may never land (a full
		// disk would otherwise wedge DRAM).
		o.flags |= flagOffloadFailed
		if pub, quiet := m.offload.failEvent(c.id, m.now().UnixNano()); pub {
			msg := "failed: " + res.Error
			if quiet > 0 {
				msg += fmt.Sprintf(" (and %d more failures on this node since the last event)", quiet)
			}
			m.publish(Event{Kind: "offload", Tenant: t, Key: res.Key, Node: c.id, Message: msg})
		}
		return nil
	}
	if !o.complete {
		return kverr.New(kverr.ReplicaIsNotReady, res.Key, "object is being written again")
	}
	if m.rmq.kills(c.id, t, res.Key, DiskLocation{res.Bucket, res.Offset}) {
		// A removal of this key is on its way to the appliance and will
		// delete this copy: it must not become a replica.
		m.ctr.add(cOffloadsFailed, 1)
		return kverr.New(kverr.ObjectNotFound, res.Key, "a removal of this key is pending on %s: copy not kept", c.id)
	}
	m.addDiskReplicaLocked(sh, k, o, c, res.Bucket, res.Offset, res.Length)
	m.ctr.add(cOffloadsCompleted, 1)
	if m.eventsWanted() {
		m.publish(Event{Kind: "offload", Tenant: t, Key: res.Key, Node: c.id, Bytes: o.size, Message: "complete"})
	}
	return nil
}

// RegisterDiskObjects re-announces LOCAL_DISK replicas an appliance found on
// its SSD after a restart. Per object: same key and size → the replica is
// added if missing; absent → a COMPLETE object with only that replica;
// different size → OBJECT_ALREADY_EXISTS. One result per object, in order.
func (m *Master) RegisterDiskObjects(ctx context.Context, clientID string, objs []DiskObject) ([]error, error) {
	c := m.clients.get(clientID)
	if c == nil || ClientState(c.state.Load()) == ClientGone {
		return nil, kverr.New(kverr.ClientNotFound, "", "register disk objects: unknown client %q", clientID)
	}
	now := m.now().UnixNano()
	res := make([]error, len(objs))
	for i, d := range objs {
		res[i] = m.registerDisk(c, d, now)
	}
	return res, nil
}

func (m *Master) registerDisk(c *client, d DiskObject, now int64) error {
	t, k, err := m.checkKey(d.Tenant, d.Key)
	if err != nil {
		return err
	}
	if d.Size == 0 || d.Length != d.Size {
		return kverr.New(kverr.InvalidParams, d.Key, "disk object size %d, length %d", d.Size, d.Length)
	}
	if d.Bucket == noBucket {
		return kverr.New(kverr.InvalidParams, d.Key, "bucket %d is not a bucket id", d.Bucket)
	}
	sh := m.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if m.rmq.kills(c.id, t, d.Key, DiskLocation{d.Bucket, d.Offset}) {
		return kverr.New(kverr.ObjectNotFound, d.Key, "removed: the removal is pending on %s", c.id)
	}
	if o := sh.objs[k]; o != nil {
		if o.size != d.Size {
			return kverr.New(kverr.ObjectAlreadyExists, d.Key, "exists with size %d, disk copy has %d", o.size, d.Size)
		}
		if !o.complete {
			return kverr.New(kverr.ReplicaIsNotReady, d.Key, "a put of this key is in flight")
		}
		m.addDiskReplicaLocked(sh, k, o, c, d.Bucket, d.Offset, d.Length)
		return nil
	}
	if !mayCreateLocked(sh, c, k) {
		return kverr.New(kverr.ObjectNotFound, d.Key, "no such object: %s is re-registering after a restart, and this copy is not one the master acknowledged (or its object was removed since)", c.id)
	}
	if m.nObjects.Add(1) > int64(m.cfg.MaxObjects) {
		m.nObjects.Add(-1)
		return kverr.New(kverr.ObjectCountExceeded, d.Key, "object count limit %d reached", m.cfg.MaxObjects)
	}
	o := &object{writer: c.id, size: d.Size, started: now, created: now, crc: d.CRC32C, complete: true, flags: flagHasCRC}
	o.replicas = []replica{{disk: c, bucket: d.Bucket, offset: d.Offset, length: d.Length, typ: LocalDisk, state: Complete}}
	sh.objs[k] = o
	indexDiskLocked(sh, k, c, d.Bucket)
	m.tenantUsage(t).Add(d.Size)
	return nil
}

// DropBucket forgets every LOCAL_DISK replica of clientID's bucket; objects
// left with no replica disappear. The appliance deletes the bucket files only
// after this returns OK.
func (m *Master) DropBucket(ctx context.Context, clientID string, bucket uint64) error {
	c := m.clients.get(clientID)
	if c == nil {
		return kverr.New(kverr.ClientNotFound, "", "drop bucket: unknown client %q", clientID)
	}
	if bucket == noBucket {
		return kverr.New(kverr.InvalidParams, "", "drop bucket: bucket %d is not a bucket id", bucket)
	}
	m.dropDisk(c, bucket, dropBucket)
	m.ctr.add(cDiskBucketsDropped, 1)
	m.publish(Event{Kind: "bucket_delete", Node: clientID, Segment: clientID + "/ssd", Message: "bucket dropped"})
	return nil
}
