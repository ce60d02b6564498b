package master

import (
	"context"
	"regexp"
	"runtime/metrics"
	"slices"
	"strings"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// publicReplica translates a replica for callers. Called with its shard locked.
func (m *Master) publicReplica(r *replica) Replica {
	out := Replica{Type: r.typ, State: r.state, Offset: r.offset, Length: r.length}
	if r.seg != nil {
		sp := &r.seg.spec
		out.Segment, out.Node, out.Endpoint = sp.Name, sp.Node, sp.Endpoint
		if r.typ == NOF {
			out.NQN, out.NSID, out.TargetAddr = sp.NQN, sp.NSID, sp.TargetAddr
		} else {
			out.Offer, out.FreeSeq = sp.Offer, r.seg.freeSeq.Load()
		}
	} else if r.disk != nil {
		out.Segment, out.Node, out.Endpoint, out.Bucket = r.disk.ssdName, r.disk.id, r.disk.getEndpoint(), r.bucket
	}
	return out
}

func (m *Master) publicReplicas(rs []replica) []Replica {
	out := make([]Replica, len(rs))
	for i := range rs {
		out[i] = m.publicReplica(&rs[i])
	}
	return out
}

// MaxRemovePattern bounds RemoveByRegex's pattern (bytes): compiling and
// matching cost grow with it, and every appliance with an SSD tier records
// it once.
const MaxRemovePattern = 4096

// removeMatching removes every removable object of tenant whose key
// matches. It holds one shard at a time (readers of other shards never
// wait for it) and stops between shards when ctx ends, returning what it
// removed so far with ctx's error. Appliances with an SSD tier get one
// cutoff each (pattern "" = every key), queued before the scan so that an
// offload or registration of a matching key during the scan is refused,
// and handed out once the scan knows which copies to keep (objects it
// skipped); the call then waits for their acknowledgement like Remove.
func (m *Master) removeMatching(ctx context.Context, tenant, pattern string, match func(key string) bool, force bool) (int, error) {
	// One bound for the wait for copies being made and the appliances'
	// confirmations, as Remove (the scan itself is not bounded by it).
	deadline := time.Now().Add(m.cfg.RemoveSyncTimeout)
	// Objects appliances have not reported yet would escape the scan and
	// come back with their reports: wait for the rebuild to end first.
	if err := m.awaitRebuilt(ctx, deadline); err != nil {
		return 0, err
	}
	m.awaitOffloadsOf(ctx, deadline, func(ck string) bool {
		t, key := splitCK(ck)
		return t == tenant && match(key)
	})
	type cut struct {
		c       *client
		r       *pendingRemoval
		keep    []DiskLocation
		removed []string // keys removed with a copy on c (for a cancelled scan)
	}
	var cuts []*cut
	byNode := map[*client]*cut{}
	for _, c := range m.diskNodes() {
		r := m.rmq.add(c.id, &pendingRemoval{DiskRemoval: DiskRemoval{Tenant: tenant, Cutoff: true, Pattern: pattern}, match: match})
		ct := &cut{c: c, r: r}
		cuts = append(cuts, ct)
		byNode[c] = ct
	}
	n := 0
	var err error
	for i := range m.shards {
		if err = ctx.Err(); err != nil {
			break
		}
		sh := &m.shards[i]
		now := m.now().UnixNano()
		sh.mu.Lock()
		seen := 0
		for k, o := range sh.objs {
			if seen++; seen%1024 == 0 && ctx.Err() != nil {
				break // the rest of this shard stays; what was removed is queued below
			}
			t, key := splitCK(k)
			if t != tenant || !match(key) {
				continue
			}
			if m.removable(o, key, force, now) != nil {
				for j := range o.replicas {
					r := &o.replicas[j]
					if ct := byNode[r.disk]; r.typ == LocalDisk && ct != nil {
						ct.keep = append(ct.keep, DiskLocation{r.bucket, r.offset})
					}
				}
				continue
			}
			for j := range o.replicas {
				r := &o.replicas[j]
				if ct := byNode[r.disk]; r.typ == LocalDisk && ct != nil {
					ct.removed = append(ct.removed, key)
				}
			}
			m.removeLocked(sh, k, o)
			n++
		}
		sh.mu.Unlock()
	}
	if err == nil {
		err = ctx.Err() // cancelled inside the last shard scanned
	}
	if err != nil {
		// Cancelled: the objects of unscanned shards stay, so the cutoffs
		// cannot go out. What was removed must still not come back: one
		// delete per removed key with an SSD copy, queued before the
		// cutoffs (which guard those keys meanwhile) are withdrawn.
		for _, ct := range cuts {
			for _, key := range ct.removed {
				m.rmq.add(ct.c.id, &pendingRemoval{DiskRemoval: DiskRemoval{Tenant: tenant, Key: key}, sealed: true})
			}
			m.rmq.withdraw(ct.c.id, ct.r)
		}
		if n > 0 {
			m.publish(Event{Kind: "remove", Tenant: tenant, Message: "bulk remove (cancelled)"})
		}
		return n, kverr.New(kverr.UnavailableInCurrentStatus, "", "bulk remove cancelled after %d objects: %v", n, err)
	}
	waits := map[string]*pendingRemoval{}
	for _, ct := range cuts {
		m.rmq.seal(ct.c.id, ct.r, ct.keep)
		if ClientState(ct.c.state.Load()) != ClientGone {
			waits[ct.c.id] = ct.r // a gone one takes it when it comes back
		}
	}
	if n > 0 {
		m.publish(Event{Kind: "remove", Tenant: tenant, Message: "bulk remove"})
	}
	if m.cfg.RemoveSyncTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	return n, m.awaitRemoved(ctx, "", waits)
}

// awaitRebuilt waits while the master settles (settling), until
// deadline or ctx's end: then UNAVAILABLE_IN_CURRENT_STATUS saying why.
// Nothing is waited for when RemoveSyncTimeout < 0.
func (m *Master) awaitRebuilt(ctx context.Context, deadline time.Time) error {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		if settling, _ := m.settling(); !settling {
			return nil
		}
		if m.cfg.RemoveSyncTimeout < 0 || !rebuildPause(wctx) {
			return m.errSettling("")
		}
	}
}

// awaitOffloadsOf waits until the offload tasks dispatched now for the
// objects match accepts (composite keys) have ended, or deadline passes
// or ctx ends: the scan of a bulk remove skips an object being copied to
// SSD, so without the wait a RemoveAll right after puts (offload
// immediate) left the newest objects behind. Tasks dispatched meanwhile
// are not waited for. Nothing is waited for when RemoveSyncTimeout < 0.
func (m *Master) awaitOffloadsOf(ctx context.Context, deadline time.Time, match func(ck string) bool) {
	if m.cfg.RemoveSyncTimeout < 0 {
		return
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// Taken before each look: a task ending after it wakes the wait.
	progress := m.offload.progress()
	cks := m.offload.outstandingMatching(match)
	for len(cks) > 0 && waitDone(wctx, progress) {
		progress = m.offload.progress()
		cks = m.offload.stillOutstanding(cks)
	}
}

// RemoveByRegex removes the objects of tenant whose key matches expr (Go
// RE2 syntax, at most MaxRemovePattern bytes), skipping leased ones unless
// force and in-flight ones always; objects being copied to SSD when it is
// called are waited for first (awaitOffloadsOf). It returns how many it removed. It
// stops between shards when ctx ends (see removeMatching).
func (m *Master) RemoveByRegex(ctx context.Context, tenant, expr string, force bool) (int, error) {
	t, err := normTenant(tenant)
	if err != nil {
		return 0, err
	}
	if len(expr) > MaxRemovePattern {
		return 0, kverr.New(kverr.InvalidParams, "", "regex of %d bytes: at most %d", len(expr), MaxRemovePattern)
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return 0, kverr.New(kverr.InvalidParams, "", "regex %q: %v", expr, err)
	}
	return m.removeMatching(ctx, t, expr, re.MatchString, force)
}

// RemoveAll removes every object of tenant with RemoveByRegex's rules.
func (m *Master) RemoveAll(ctx context.Context, tenant string, force bool) (int, error) {
	t, err := normTenant(tenant)
	if err != nil {
		return 0, err
	}
	return m.removeMatching(ctx, t, "", func(string) bool { return true }, force)
}

// BatchPutStart is PutStart per item (client and tenant from the batch).
func (m *Master) BatchPutStart(ctx context.Context, client, tenant string, reqs []PutRequest) []PutResult {
	out := make([]PutResult, len(reqs))
	for i, r := range reqs {
		r.Client, r.Tenant = client, tenant
		out[i].Replicas, out[i].Err = m.PutStart(ctx, r)
	}
	return out
}

// BatchPutEnd is PutEnd per key, in order.
func (m *Master) BatchPutEnd(ctx context.Context, client, tenant string, keys []string) []error {
	return m.batchPutEndExcept(ctx, client, tenant, keys, "")
}

// batchPutEndExcept is BatchPutEnd waiting for no acknowledgement of node
// (a direct put's holder, which confirms its record to its client itself;
// "": wait for every holder).
func (m *Master) batchPutEndExcept(ctx context.Context, client, tenant string, keys []string, node string) []error {
	out := make([]error, len(keys))
	var ws []dramWait
	defer func() { m.awaitCommits(ctx, dropWaits(ws, node)) }() // one wait for the batch
	for i, k := range keys {
		var w []dramWait
		w, out[i] = m.putEnd(client, tenant, k, endChecksum{})
		ws = append(ws, w...)
	}
	return out
}

// BatchPutRevoke is PutRevoke per key, in order.
func (m *Master) BatchPutRevoke(ctx context.Context, client, tenant string, keys []string) []error {
	out := make([]error, len(keys))
	var ws []dramWait
	for i, k := range keys {
		var w []dramWait
		w, out[i] = m.putRevoke(client, tenant, k)
		ws = append(ws, w...)
	}
	m.awaitFrees(ctx, ws) // one wait for the batch
	return out
}

// BatchGetReplicaList is GetReplicaList per key, in order.
func (m *Master) BatchGetReplicaList(ctx context.Context, client, tenant string, keys []string) []GetResult {
	out := make([]GetResult, len(keys))
	for i, k := range keys {
		out[i].List, out[i].Err = m.GetReplicaList(ctx, client, tenant, k)
	}
	return out
}

// BatchExist is Exist per key, in order.
func (m *Master) BatchExist(ctx context.Context, tenant string, keys []string) ([]bool, []error) {
	ok := make([]bool, len(keys))
	errs := make([]error, len(keys))
	for i, k := range keys {
		ok[i], errs[i] = m.Exist(ctx, tenant, k)
	}
	return ok, errs
}

// BatchRemove is Remove per key, in order.
func (m *Master) BatchRemove(ctx context.Context, tenant string, keys []string, force bool) []error {
	out := make([]error, len(keys))
	for i, k := range keys {
		out[i] = m.Remove(ctx, tenant, k, force)
	}
	return out
}

// infoLocked describes o. Its shard must be locked.
func (m *Master) infoLocked(k string, o *object) ObjectInfo {
	t, key := splitCK(k)
	info := ObjectInfo{
		Tenant: t, Key: key, Size: o.size, CRC32C: o.crc, HasChecksum: o.flags&flagHasCRC != 0,
		Writer: o.writer, Created: unixOrZero(o.created), PutStarted: unixOrZero(o.started),
		LeaseDeadline: m.leaseDeadline(o), SoftPin: o.flags&flagSoftPin != 0, HardPin: o.flags&flagHardPin != 0,
		ReadCount: uint64(o.readCount), Replicas: m.publicReplicas(o.replicas), Complete: o.complete,
		OffloadPending: o.offload != offloadNone,
	}
	if info.SoftPin && o.complete {
		info.SoftPinDeadline = unixOrZero(o.softPinEnd)
	}
	for i := range o.replicas {
		info.Replicas[i].Unavailable = !servable(&o.replicas[i])
	}
	return info
}

// GetObject returns an object's metadata (in flight or not). It does not
// touch the lease.
func (m *Master) GetObject(ctx context.Context, tenant, key string) (ObjectInfo, error) {
	_, k, err := m.checkKey(tenant, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	sh := m.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[k]
	if o == nil {
		return ObjectInfo{}, kverr.New(kverr.ObjectNotFound, key, "no such object")
	}
	return m.infoLocked(k, o), nil
}

// ListObjects lists objects in key order (tenant, then key, with
// AllTenants), those with Prefix after Cursor. The cursor is opaque: for one
// tenant it is the last key returned; with AllTenants it is tenant, NUL, key.
func (m *Master) ListObjects(ctx context.Context, opts ListOptions) (ObjectPage, error) {
	limit := opts.Limit
	switch {
	case limit < 0 || limit > 10000:
		return ObjectPage{}, kverr.New(kverr.InvalidParams, "", "list limit %d outside [0, 10000]", limit)
	case limit == 0:
		limit = 1000
	}
	t, err := normTenant(opts.Tenant)
	if err != nil {
		return ObjectPage{}, err
	}
	type item struct{ sort, ck string }
	var items []item
	m.forEachShard(func(sh *shard) {
		for k := range sh.objs {
			tt, key := splitCK(k)
			if !strings.HasPrefix(key, opts.Prefix) {
				continue
			}
			s := key
			if opts.AllTenants {
				s = tt + "\x00" + key
			} else if tt != t {
				continue
			}
			if opts.Cursor != "" && s <= opts.Cursor {
				continue
			}
			items = append(items, item{s, k})
		}
	})
	more := len(items) > limit
	if more {
		selectSmallest(items, limit, func(a, b item) bool { return a.sort < b.sort })
		items = items[:limit]
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.sort, b.sort) })
	page := ObjectPage{Objects: make([]ObjectInfo, 0, len(items))}
	for _, it := range items {
		sh := m.shardOf(it.ck)
		sh.mu.Lock()
		if o := sh.objs[it.ck]; o != nil {
			page.Objects = append(page.Objects, m.infoLocked(it.ck, o))
		}
		sh.mu.Unlock()
	}
	if more && len(items) > 0 {
		page.NextCursor = items[len(items)-1].sort
	}
	return page, nil
}

// tierStats returns memory, nof and disk figures.
func (m *Master) tierStats() []TierStats {
	mem := TierStats{Tier: "memory", Hits: m.ctr.get(cGetHitsMemory)}
	nof := TierStats{Tier: "nof", Hits: m.ctr.get(cGetHitsNOF)}
	for _, s := range m.segs.all() {
		ts := &mem
		if s.spec.Type == NOF {
			ts = &nof
		}
		ts.Capacity += s.spec.Size / s.align * s.align
		ts.Used += s.used.Load()
		ts.Objects += uint64(max(s.replicas.Load(), 0))
	}
	mem.Misses = m.ctr.get(cGets) - mem.Hits
	nof.Misses = m.ctr.get(cGets) - mem.Hits - nof.Hits
	disk := TierStats{Tier: "disk", Hits: m.ctr.get(cGetHitsDisk), Misses: m.ctr.get(cGetMisses)}
	for _, c := range m.clients.list() {
		if ClientState(c.state.Load()) == ClientGone {
			continue
		}
		c.mu.Lock()
		disk.Capacity += c.disk.Capacity
		disk.Used += c.disk.Used
		disk.Objects += c.disk.Objects
		c.mu.Unlock()
	}
	return []TierStats{mem, nof, disk}
}

// Stats returns object count, tier figures, the named counters and the
// heap in use.
func (m *Master) Stats(ctx context.Context) Stats {
	st := Stats{Objects: uint64(max(m.nObjects.Load(), 0)), Tiers: m.tierStats(), Counters: make(map[string]uint64, numCounters), Leader: !m.fenced.Load()}
	st.Rebuilding, st.RebuildReason = m.Rebuilding()
	for i := counter(0); i < numCounters; i++ {
		st.Counters[counterNames[i]] = m.ctr.get(i)
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		st.HeapBytes = s[0].Value.Uint64()
	}
	return st
}

// GetTiers returns the tier settings and figures.
func (m *Master) GetTiers(ctx context.Context) Tiers {
	s := m.settings.Load()
	return Tiers{Dram: s.dram, SSD: s.ssd, Stats: m.tierStats()}
}

// UpdateTiers changes the set fields; an invalid value changes nothing.
// SSD settings reach appliances in their next heartbeat response.
func (m *Master) UpdateTiers(ctx context.Context, u TierUpdate) (Tiers, error) {
	for {
		old := m.settings.Load()
		n := *old
		if u.HighWatermark != nil {
			n.dram.HighWatermark = *u.HighWatermark
		}
		if u.EvictionRatio != nil {
			n.dram.EvictionRatio = *u.EvictionRatio
		}
		if u.LeasePolicy != nil {
			n.dram.LeasePolicy = *u.LeasePolicy
		}
		if u.OffloadMode != nil {
			n.ssd.OffloadMode = *u.OffloadMode
		}
		if u.SSDPolicy != nil {
			n.ssd.SSDPolicy = *u.SSDPolicy
		}
		if u.SSDCapacity != nil {
			n.ssd.SSDCapacity = *u.SSDCapacity
		}
		if u.SSDHighWatermark != nil {
			n.ssd.SSDHighWatermark = *u.SSDHighWatermark
		}
		if err := validateDram(n.dram.HighWatermark, n.dram.EvictionRatio, n.dram.LeasePolicy); err != nil {
			return Tiers{}, err
		}
		if err := validateSSD(n.ssd.OffloadMode, n.ssd.SSDPolicy, n.ssd.SSDHighWatermark); err != nil {
			return Tiers{}, err
		}
		pol, err := NewLeasePolicy(n.dram.LeasePolicy, m.cfg.FrequencyBonus, m.cfg.FrequencyMaxBonus)
		if err != nil {
			return Tiers{}, err
		}
		n.policy = pol
		if m.settings.CompareAndSwap(old, &n) {
			return m.GetTiers(ctx), nil
		}
	}
}
