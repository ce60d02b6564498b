package master

import (
	"cmp"
	"slices"
)

// Making room for a large object (see "Eviction" in the package doc).
//
// An eviction pass frees bytes in lease order, wherever they lie. A put
// larger than the objects around it can then still fail: the freed bytes
// are scattered and no free extent is as large as the object (a 50 MB put
// into 256 MiB of DRAM full of evictable 1 MiB objects failed twice before a
// third pass had freed enough by chance). makeRoom instead looks, in each
// MEMORY segment, for the cheapest address range of at least the object's
// size made only of free space and objects that can be evicted now, and
// evicts those objects.

// roomItem is one MEMORY replica's allocation in a segment.
type roomItem struct {
	off, end uint64
	ref      candRef
	bytes    uint64 // the object's MEMORY bytes: what evicting it costs
	movable  bool   // evictable now
}

// holeFits reports whether some MEMORY segment taking allocations has a
// free extent of at least size bytes.
func (m *Master) holeFits(size uint64) bool {
	for _, s := range m.segs.all() {
		if s.spec.Type != Memory || !s.allocatable() {
			continue
		}
		s.mu.Lock()
		largest := s.alloc.largest()
		s.mu.Unlock()
		if largest >= s.roundUp(size) {
			return true
		}
	}
	return false
}

// evictableNowLocked reports whether evictOne would free o's MEMORY
// replicas now (first-pass rules: soft pins are kept).
func (m *Master) evictableNowLocked(o *object, st *settings, now int64) bool {
	switch {
	case !o.complete, o.flags&flagHardPin != 0, m.leased(o, now),
		o.offload != offloadNone && !m.cfg.ForceEvict,
		o.flags&flagSoftPin != 0 && o.softPinEnd > now:
		return false
	case st.ssd.OffloadMode != OffloadOff && !m.cfg.ForceEvict && !hasDiskCopy(o) && offloadSource(o) != nil:
		return false // would be offloaded first, not freed
	}
	return true
}

// makeRoom evicts the objects of the cheapest range (fewest object bytes
// evicted) of at least size bytes in one MEMORY segment, the range holding
// only free space and objects evictable now. It reports whether it found
// one. evictMu must be held.
func (m *Master) makeRoom(size uint64, rep *EvictionReport, st *settings, now int64) bool {
	// Without one object evictable now no range can be emptied: every run
	// would be free space alone, which holeFits already ruled out. This is
	// the common case when DRAM is full of objects waiting for their
	// offload (--offload immediate at the watermark), where each put would
	// otherwise collect and sort every replica of every segment for nothing
	// (22 % of a standalone's CPU in one profile of 4 KiB puts there).
	if !m.anyEvictableNow(st, now) {
		return false
	}
	items := map[*segment][]roomItem{}
	m.forEachShard(func(sh *shard) {
		for _, e := range sh.mem {
			k, o := e.ck, e.o
			movable := m.evictableNowLocked(o, st, now)
			var b uint64
			if movable {
				b = memBytesLocked(o)
			}
			for i := range o.replicas {
				r := &o.replicas[i]
				if r.typ != Memory || r.seg == nil {
					continue
				}
				items[r.seg] = append(items[r.seg], roomItem{off: r.offset, end: r.offset + r.allocLen(),
					ref: candRef{ck: k, obj: o}, bytes: b, movable: movable})
			}
		}
	})
	var (
		best     []roomItem
		bestCost uint64
		found    bool
	)
	for _, s := range m.segs.all() {
		if s.spec.Type != Memory || !s.allocatable() {
			continue
		}
		s.mu.Lock()
		total := s.alloc.total
		var free []extent
		s.alloc.byOff.Ascend(func(e extent) bool { free = append(free, e); return true })
		s.mu.Unlock()
		win, cost, ok := cheapestRange(withBlockers(items[s], free, total), s.roundUp(size), total)
		if ok && (!found || cost < bestCost) {
			best, bestCost, found = win, cost, true
		}
	}
	for _, it := range best {
		m.evictOne(it.ref, rep, st, now, false)
	}
	return found
}

// anyEvictableNow reports whether some object with a MEMORY replica could
// be evicted now (evictableNowLocked), stopping at the first.
func (m *Master) anyEvictableNow(st *settings, now int64) bool {
	found := false
	m.forEachShard(func(sh *shard) {
		if found {
			return
		}
		for _, e := range sh.mem {
			if m.evictableNowLocked(e.o, st, now) {
				found = true
				return
			}
		}
	})
	return found
}

// withBlockers returns items sorted by offset, plus an unmovable item for
// every byte range that is neither free nor an object's replica (space a
// taken-over put keeps reserved, or an allocation made since the scan), so
// that a range found is one the allocator will see as free once its
// objects are evicted.
func withBlockers(items []roomItem, free []extent, total uint64) []roomItem {
	slices.SortFunc(items, func(a, b roomItem) int { return cmp.Compare(a.off, b.off) })
	out := make([]roomItem, 0, len(items)+8)
	cursor := uint64(0)
	fi := 0
	next := func(end uint64) { // blocker up to the next known range
		if end > cursor {
			out = append(out, roomItem{off: cursor, end: end})
		}
	}
	for _, it := range items {
		for fi < len(free) && free[fi].off < it.off {
			next(free[fi].off)
			cursor = max(cursor, free[fi].off+free[fi].size)
			fi++
		}
		next(it.off)
		out = append(out, it)
		cursor = max(cursor, it.end)
	}
	for ; fi < len(free); fi++ {
		next(free[fi].off)
		cursor = max(cursor, free[fi].off+free[fi].size)
	}
	next(total)
	return out
}

// cheapestRange finds, among runs of consecutive movable items (sorted by
// offset), the one whose span, from the end of the item before it (or
// 0) to the start of the item after it (or total), is at least size bytes
// and whose items cost the least to evict. Free space between items is
// part of every span that covers it. A run may be empty only if a free
// extent alone is large enough, which the allocator would have found.
func cheapestRange(items []roomItem, size, total uint64) (run []roomItem, cost uint64, ok bool) {
	startOf := func(j int) uint64 { // where the item after the run starts
		if j < len(items) {
			return items[j].off
		}
		return total
	}
	endBefore := func(i int) uint64 { // where the item before the run ends
		if i > 0 {
			return items[i-1].end
		}
		return 0
	}
	var sum uint64
	i := 0
	for j := 0; j < len(items); j++ {
		if !items[j].movable {
			i, sum = j+1, 0
			continue
		}
		sum += items[j].bytes
		// Shrink from the left while the run without items[i] still spans size.
		for i < j && startOf(j+1)-items[i].end >= size {
			sum -= items[i].bytes
			i++
		}
		if startOf(j+1)-endBefore(i) >= size && (!ok || sum < cost) {
			run, cost, ok = items[i:j+1], sum, true
		}
	}
	return run, cost, ok
}

// evictForHole makes room for an object of size bytes (makeRoom) unless a
// free extent already fits it. It reports whether an allocation is worth
// trying again.
func (m *Master) evictForHole(size uint64) bool {
	m.evictMu.Lock()
	defer m.evictMu.Unlock()
	if m.holeFits(size) {
		return true // room was made meanwhile
	}
	st := m.settings.Load()
	rep := EvictionReport{Time: m.now()}
	return m.makeRoom(size, &rep, st, rep.Time.UnixNano()) && rep.FreedObjects > 0
}
