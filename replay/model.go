package replay

import "github.com/kvtier/kvtier/master"

// model is the DRAM tier as the simulator sees it: a set of block ids with a
// capacity in blocks. Time is virtual nanoseconds.
type model interface {
	contains(id int64) bool
	// read records a read of a present block (refreshes its lease or recency).
	read(id int64, now int64)
	// insert stores an absent block; false means no space could be freed.
	insert(id int64, now int64) bool
	// touchAll reports whether the reference semantics (every block of a
	// request touched after the lookup) apply instead of read+insert.
	touchAll() bool
	evictions() int64
	len() int
}

// lruModel is exact LRU by block count: an intrusive doubly linked list over a
// slice, one block evicted per insert when full.
type lruModel struct {
	capacity int
	idx      map[int64]int32
	nodes    []lruNode // nodes[0] is the sentinel
	free     []int32
	evicted  int64
}

type lruNode struct {
	id         int64
	prev, next int32
}

var _ model = (*lruModel)(nil)

func newLRUModel(capacity int) *lruModel {
	m := &lruModel{capacity: capacity, idx: make(map[int64]int32, capacity)}
	m.nodes = append(m.nodes, lruNode{id: -1})
	return m
}

func (m *lruModel) contains(id int64) bool { _, ok := m.idx[id]; return ok }
func (m *lruModel) touchAll() bool         { return true }
func (m *lruModel) evictions() int64       { return m.evicted }
func (m *lruModel) len() int               { return len(m.idx) }

func (m *lruModel) unlink(i int32) {
	n := &m.nodes[i]
	m.nodes[n.prev].next = n.next
	m.nodes[n.next].prev = n.prev
}

func (m *lruModel) pushFront(i int32) {
	head := m.nodes[0].next
	m.nodes[i].prev, m.nodes[i].next = 0, head
	m.nodes[head].prev = i
	m.nodes[0].next = i
}

func (m *lruModel) read(id int64, _ int64) {
	if i, ok := m.idx[id]; ok {
		m.unlink(i)
		m.pushFront(i)
	}
}

func (m *lruModel) insert(id int64, _ int64) bool {
	if m.capacity <= 0 {
		return false
	}
	if len(m.idx) >= m.capacity {
		tail := m.nodes[0].prev
		m.unlink(tail)
		delete(m.idx, m.nodes[tail].id)
		m.free = append(m.free, tail)
		m.evicted++
	}
	var i int32
	if n := len(m.free); n > 0 {
		i = m.free[n-1]
		m.free = m.free[:n-1]
	} else {
		m.nodes = append(m.nodes, lruNode{})
		i = int32(len(m.nodes) - 1)
	}
	m.nodes[i].id = id
	m.idx[id] = i
	m.pushFront(i)
	return true
}

// leaseModel is the master's DRAM eviction: lease deadlines, a policy key,
// watermark-triggered passes that free EvictionRatio of capacity, chosen by an
// O(n) selection over lease-expired objects (never a sort, never a list).
type leaseModel struct {
	policy    LeasePolicy
	capacity  int
	highMark  int // evict when len > highMark
	batch     int // objects freed per pass
	ents      []leaseEnt
	idx       map[int64]int32
	cand      []candidate // scratch for eviction passes
	evicted   int64
	shortfall int64          // passes that freed fewer objects than asked (all leased)
	history   *historyTable  // nil when the policy keeps no history
	onEvict   func(id int64) // optional; called for every evicted id
	turnover  master.Turnover
}

type leaseEnt struct {
	id       int64
	deadline int64
	reads    uint32
}

type candidate struct {
	key int64
	id  int64
}

var _ model = (*leaseModel)(nil)

func newLeaseModel(capacity int, p LeasePolicy, highWatermark, evictionRatio float64) *leaseModel {
	m := &leaseModel{policy: p, capacity: capacity, idx: make(map[int64]int32, capacity)}
	m.highMark = int(highWatermark * float64(capacity))
	m.batch = max(1, int(evictionRatio*float64(capacity)+0.5))
	if p.Kind == PolicyFrequency && p.History > 0 {
		m.history = newHistoryTable(p.History)
	}
	return m
}

func (m *leaseModel) contains(id int64) bool { _, ok := m.idx[id]; return ok }
func (m *leaseModel) touchAll() bool         { return false }
func (m *leaseModel) evictions() int64       { return m.evicted }
func (m *leaseModel) len() int               { return len(m.ents) }

func (m *leaseModel) read(id int64, now int64) {
	if i, ok := m.idx[id]; ok {
		e := &m.ents[i]
		e.deadline = now + int64(m.policy.LeaseTTL)
		e.reads++

	}
}

func (m *leaseModel) insert(id int64, now int64) bool {
	if m.capacity <= 0 {
		return false
	}
	if len(m.ents) >= m.capacity { // allocation failure triggers a pass
		m.evict(now, m.batch)
		if len(m.ents) >= m.capacity {
			return false
		}
	}
	m.idx[id] = int32(len(m.ents))
	var reads uint32
	if m.history != nil {
		if r, ok := m.history.take(id); ok {
			reads = r + 1 // the re-put after an eviction is itself a reference
		}
	}
	m.ents = append(m.ents, leaseEnt{id: id, deadline: now, reads: reads})
	if len(m.ents) > m.highMark {
		m.evict(now, m.batch)
	}
	return true
}

// evict frees up to n lease-expired objects with the smallest keys. As
// the master's pass, it orders by the policy adjusted to the DRAM lifetime
// measured over the previous passes (master.Turnover, LifetimeScaled).
func (m *leaseModel) evict(now int64, n int) {
	pol := m.policy.Master()
	if ls, ok := pol.(master.LifetimeScaled); ok {
		if l, ok := m.turnover.Lifetime(now, m.capacity); ok {
			pol = ls.ForLifetime(l)
		}
	}
	c := m.cand[:0]
	for i := range m.ents {
		if e := &m.ents[i]; e.deadline <= now {
			c = append(c, candidate{key: pol.EvictionKey(e.deadline, e.reads), id: e.id})
		}
	}
	if len(c) > n {
		selectSmallest(c, n)
		c = c[:n]
	} else if len(c) < n {
		m.shortfall++
	}
	for _, x := range c {
		if m.history != nil {
			if i, ok := m.idx[x.id]; ok {
				m.history.put(x.id, m.ents[i].reads)
			}
		}
		m.remove(x.id)
		if m.onEvict != nil {
			m.onEvict(x.id)
		}
	}
	m.evicted += int64(len(c))
	m.turnover.Record(now, len(c))
	m.cand = c[:0]
}

func (m *leaseModel) remove(id int64) {
	i, ok := m.idx[id]
	if !ok {
		return
	}
	last := int32(len(m.ents) - 1)
	if i != last {
		m.ents[i] = m.ents[last]
		m.idx[m.ents[i].id] = i
	}
	m.ents = m.ents[:last]
	delete(m.idx, id)
}

func less(a, b candidate) bool { return a.key < b.key || (a.key == b.key && a.id < b.id) }

// selectSmallest reorders c so that its first n elements are the n smallest
// (nth_element: Hoare quickselect with a median-of-three pivot, O(len(c))
// expected; the order is total, so the result is deterministic).
func selectSmallest(c []candidate, n int) {
	lo, hi := 0, len(c)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if less(c[mid], c[lo]) {
			c[mid], c[lo] = c[lo], c[mid]
		}
		if less(c[hi], c[lo]) {
			c[hi], c[lo] = c[lo], c[hi]
		}
		if less(c[hi], c[mid]) {
			c[hi], c[mid] = c[mid], c[hi]
		}
		pivot := c[mid]
		i, j := lo, hi
		for i <= j {
			for less(c[i], pivot) {
				i++
			}
			for less(pivot, c[j]) {
				j--
			}
			if i <= j {
				c[i], c[j] = c[j], c[i]
				i++
				j--
			}
		}
		// now c[lo..j] <= pivot <= c[i..hi]
		switch {
		case n-1 <= j:
			hi = j
		case n-1 >= i:
			lo = i
		default:
			return
		}
	}
}

// historyTable remembers the read counts of evicted objects, FIFO-bounded:
// the last limit evictions, as the master's history (which keeps them in
// per-shard rings but decides validity by a master-wide eviction count, so
// it remembers exactly these). A remembered id that is evicted again before
// it leaves keeps its place and takes the new count; a taken id leaves a
// hole that the FIFO reclaims when it reaches it.
type historyTable struct {
	limit int
	reads map[int64]histEnt
	fifo  []int64 // ids in eviction order (ring); stale once taken
	head  int
}

type histEnt struct {
	reads uint32
	pos   int32 // its slot in fifo
}

func newHistoryTable(limit int) *historyTable {
	return &historyTable{limit: limit, reads: make(map[int64]histEnt)}
}

func (g *historyTable) put(id int64, reads uint32) {
	if g.limit <= 0 {
		return
	}
	if e, ok := g.reads[id]; ok {
		e.reads = reads
		g.reads[id] = e
		return
	}
	var pos int
	if len(g.fifo) < g.limit {
		pos = len(g.fifo)
		g.fifo = append(g.fifo, id)
	} else {
		pos = g.head
		g.head = (g.head + 1) % g.limit
		if old := g.fifo[pos]; g.reads[old].pos == int32(pos) {
			delete(g.reads, old) // only if the slot is still old's (not a hole)
		}
		g.fifo[pos] = id
	}
	g.reads[id] = histEnt{reads: reads, pos: int32(pos)}
}

func (g *historyTable) take(id int64) (uint32, bool) {
	e, ok := g.reads[id]
	if ok {
		delete(g.reads, id) // its fifo slot becomes a hole
	}
	return e.reads, ok
}
