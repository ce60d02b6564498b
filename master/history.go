package master

import (
	"fmt"
	"hash/maphash"
	"math"
)

// Eviction history sizing (Config.EvictionHistory = 0).
const (
	// EvictionHistoryPerObject × the DRAM capacity in objects (estimated by
	// each eviction pass as capacity / mean MEMORY bytes per object; the
	// largest estimate counts) is the default history size; the replay
	// simulator uses the same factor on its capacity in blocks.
	EvictionHistoryPerObject = 4
	// evictionHistoryMin and evictionHistoryMax bound the default size
	// (entries).
	evictionHistoryMin = 4096
	evictionHistoryMax = 4_000_000
	// maxEvictionHistory bounds an explicit Config.EvictionHistory.
	maxEvictionHistory = 1 << 30
)

// history is one shard's part of the eviction history: a FIFO ring of
// 32-bit key fingerprints with their read counts and the master-wide
// eviction sequence number at which each was remembered, plus a
// linear-probing index from fingerprint to ring slot. Keys live in the
// history part of their object shard, so it is guarded by that shard's
// mutex and needs no lock of its own. About 15 bytes per entry (4
// fingerprint + 2 count + 4 sequence + 4/0.75 index).
//
// What is remembered is decided master-wide, not per shard: an entry is
// valid while fewer than the history size (Master.histLimit) evictions
// have been remembered after it, whatever its shard (see aged). The ring
// only bounds memory; it is sized with slack above the shard's share
// (ringBound) so it rarely drops a still-valid entry. A per-shard FIFO of
// exactly the shard's share would forget the blocks of one prefix, evicted
// together, at scattered times (shard loads differ), and a prefix whose
// middle block lost its count is cut there at the next eviction: on
// conversation_trace at 1,000 blocks that cost 0.079 → 0.071 prefix-hit.
type history struct {
	fps    []uint32 // ring of fingerprints; oldest at head once len == limit; 0 = taken (a hole)
	counts []uint16 // read count per ring slot (saturating)
	seqs   []uint32 // eviction sequence number per ring slot (wrapping)
	head   int      // next slot to overwrite once len(fps) == limit
	limit  int      // bound of len(fps); only grows
	index  []uint32 // ring slot + 1; 0 = empty
	live   int      // entries in index (non-hole ring slots), valid or aged
}

// aged reports whether an entry remembered at sequence then is no longer
// valid at sequence cur: maxAge or more evictions were remembered since.
// The sequence wraps at 2^32; maxAge is at most 2^30.
func aged(cur, then uint32, maxAge int64) bool { return int64(cur-then) >= maxAge }

// histFingerprint derives the stored fingerprint from the composite key's
// 64-bit hash (whose low 8 bits pick the shard): its upper 32 bits, never 0.
func histFingerprint(h uint64) uint32 {
	if fp := uint32(h >> 32); fp != 0 {
		return fp
	}
	return 1
}

func (m *Master) ckHash(c string) uint64 { return maphash.String(m.seed, c) }

// home is fp's first index slot in a table of n slots.
func home(fp uint32, n int) int { return int(uint64(fp) * uint64(n) >> 32) }

// find returns the index slot holding fp, or -1.
func (h *history) find(fp uint32) int {
	n := len(h.index)
	if n == 0 {
		return -1
	}
	for i := home(fp, n); ; i = (i + 1) % n {
		p := h.index[i]
		if p == 0 {
			return -1
		}
		if h.fps[p-1] == fp {
			return i
		}
	}
}

// slotOf returns the index slot that points at ring position pos (present).
func (h *history) slotOf(pos int) int {
	n := len(h.index)
	for i := home(h.fps[pos], n); ; i = (i + 1) % n {
		if int(h.index[i]) == pos+1 {
			return i
		}
	}
}

// unindex empties index slot i, shifting later entries of the probe run back.
func (h *history) unindex(i int) {
	n := len(h.index)
	for j := (i + 1) % n; h.index[j] != 0; j = (j + 1) % n {
		k := home(h.fps[h.index[j]-1], n)
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if (i <= j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
			h.index[i] = h.index[j]
			i = j
		}
	}
	h.index[i] = 0
	h.live--
}

func (h *history) insertIndex(pos int) {
	n := len(h.index)
	i := home(h.fps[pos], n)
	for h.index[i] != 0 {
		i = (i + 1) % n
	}
	h.index[i] = uint32(pos + 1)
	h.live++
}

// reindex rebuilds the index for a ring of capacity cap(h.fps) at load ≤ 0.75.
func (h *history) reindex() {
	h.index = make([]uint32, cap(h.fps)*4/3+1)
	h.live = 0
	for pos, fp := range h.fps {
		if fp != 0 {
			h.insertIndex(pos)
		}
	}
}

// setLimit raises the ring bound (it never shrinks: the history is sized by
// the largest DRAM population seen). A wrapped ring is first laid out oldest
// first so appending continues the FIFO order.
func (h *history) setLimit(limit int) {
	if limit <= h.limit {
		return
	}
	if len(h.fps) == h.limit && h.head != 0 {
		fps := make([]uint32, 0, len(h.fps))
		counts := make([]uint16, 0, len(h.fps))
		seqs := make([]uint32, 0, len(h.fps))
		fps = append(append(fps, h.fps[h.head:]...), h.fps[:h.head]...)
		counts = append(append(counts, h.counts[h.head:]...), h.counts[:h.head]...)
		seqs = append(append(seqs, h.seqs[h.head:]...), h.seqs[:h.head]...)
		h.fps, h.counts, h.seqs, h.head = fps, counts, seqs, 0
		h.reindex()
	}
	h.limit = limit
}

// put remembers fp's read count as the eviction with sequence number seq:
// a known fingerprint that is still valid keeps its FIFO place and
// sequence and takes the new count; an aged one is forgotten first; a new
// one goes to the tail, dropping the oldest entry when the ring is at its
// limit.
func (h *history) put(fp uint32, count uint32, seq uint32, maxAge int64) {
	if h.limit <= 0 {
		return
	}
	c := uint16(min(count, math.MaxUint16))
	if i := h.find(fp); i >= 0 {
		pos := int(h.index[i] - 1)
		if !aged(seq, h.seqs[pos], maxAge) {
			h.counts[pos] = c
			return
		}
		h.forget(i)
	}
	var pos int
	if len(h.fps) < h.limit {
		if len(h.fps) == cap(h.fps) {
			n := min(h.limit, max(16, 2*cap(h.fps)))
			h.fps = append(make([]uint32, 0, n), h.fps...)
			h.counts = append(make([]uint16, 0, n), h.counts...)
			h.seqs = append(make([]uint32, 0, n), h.seqs...)
			h.reindex()
		}
		pos = len(h.fps)
		h.fps = append(h.fps, 0)
		h.counts = append(h.counts, 0)
		h.seqs = append(h.seqs, 0)
	} else {
		pos = h.head
		h.head = (h.head + 1) % h.limit
		if h.fps[pos] != 0 {
			h.unindex(h.slotOf(pos))
		}
	}
	h.fps[pos], h.counts[pos], h.seqs[pos] = fp, c, seq
	h.insertIndex(pos)
}

// forget empties index slot i and leaves its ring slot a hole until the
// FIFO reaches it.
func (h *history) forget(i int) {
	pos := int(h.index[i] - 1)
	h.unindex(i)
	h.fps[pos], h.counts[pos], h.seqs[pos] = 0, 0, 0
}

// take returns and forgets fp's remembered read count if it is still valid
// at sequence cur; an aged entry is forgotten and not returned.
func (h *history) take(fp uint32, cur uint32, maxAge int64) (uint32, bool) {
	if h.live == 0 {
		return 0, false
	}
	i := h.find(fp)
	if i < 0 {
		return 0, false
	}
	pos := int(h.index[i] - 1)
	c, old := uint32(h.counts[pos]), aged(cur, h.seqs[pos], maxAge)
	h.forget(i)
	return c, !old
}

// valid counts the entries still valid at sequence cur.
func (h *history) valid(cur uint32, maxAge int64) int {
	n := 0
	for pos, fp := range h.fps {
		if fp != 0 && !aged(cur, h.seqs[pos], maxAge) {
			n++
		}
	}
	return n
}

// bytes is the heap the history part holds.
func (h *history) bytes() int {
	return cap(h.fps)*4 + cap(h.counts)*2 + cap(h.seqs)*4 + len(h.index)*4
}

// ringBound is the ring bound of each shard for a history of n entries:
// the shard's share s plus 4·√s + 8 of slack, so a shard that happens to
// receive more than its share of the last n evictions (a binomial count
// with mean s) rarely drops an entry that is still valid.
func ringBound(n int64) int {
	s := float64((n + numShards - 1) / numShards)
	return int(s + 4*math.Sqrt(s) + 8)
}

// growHistory raises the default history size to EvictionHistoryPerObject ×
// objects (bounded); called by eviction passes with the DRAM capacity in
// objects (capacityObjects: capacity / mean object size). An explicit
// Config.EvictionHistory never changes.
func (m *Master) growHistory(objects int) {
	if m.cfg.EvictionHistory != 0 {
		return
	}
	want := int64(min(max(EvictionHistoryPerObject*objects, evictionHistoryMin), evictionHistoryMax))
	for {
		cur := m.histLimit.Load()
		if want <= cur || m.histLimit.CompareAndSwap(cur, want) {
			return
		}
	}
}

// rememberEvictedLocked records o's read count in the eviction history when
// its MEMORY replicas leave DRAM by eviction (frequency policy only, as the
// simulator). sh.mu (the shard of c) must be held.
func (m *Master) rememberEvictedLocked(sh *shard, c string, o *object, pol LeasePolicy) {
	n := m.histLimit.Load()
	if n <= 0 || pol.Name() != PolicyFrequency {
		return
	}
	sh.hist.setLimit(ringBound(n))
	sh.hist.put(histFingerprint(m.ckHash(c)), o.readCount, m.histSeq.Add(1), n)
}

// recallLocked seeds a just-completed object's read count from the eviction
// history: remembered + 1 (the re-put is itself a reference). sh.mu held.
func (m *Master) recallLocked(sh *shard, c string, o *object) {
	if sh.hist.live == 0 {
		return
	}
	if r, ok := sh.hist.take(histFingerprint(m.ckHash(c)), m.histSeq.Load(), m.histLimit.Load()); ok {
		o.readCount = uint32(min(uint64(r)+1, math.MaxUint32))
		m.ctr.add(cEvictionHistoryHits, 1)
	}
}

// historyStats are the eviction history's figures (tests, benchmarks).
type historyStats struct {
	limit   int64 // entries (total over shards); 0 = disabled
	entries int64 // remembered keys still valid (at most limit)
	held    int64 // ring entries, valid or aged
	bytes   int64 // heap held
}

func (m *Master) historyStats() historyStats {
	st := historyStats{limit: m.histLimit.Load()}
	m.forEachShard(func(sh *shard) {
		st.entries += int64(sh.hist.valid(m.histSeq.Load(), st.limit))
		st.held += int64(sh.hist.live)
		st.bytes += int64(sh.hist.bytes())
	})
	return st
}

// check verifies the history part's consistency (CheckInvariants).
func (h *history) check() error {
	if len(h.fps) != len(h.counts) || len(h.fps) != len(h.seqs) || (h.limit > 0 && len(h.fps) > h.limit) || h.limit < 0 {
		return fmt.Errorf("ring of %d fingerprints, %d counts and %d sequence numbers, limit %d", len(h.fps), len(h.counts), len(h.seqs), h.limit)
	}
	if h.head != 0 && (len(h.fps) != h.limit || h.head >= h.limit) {
		return fmt.Errorf("head %d in a ring of %d (limit %d)", h.head, len(h.fps), h.limit)
	}
	live := 0
	for pos, fp := range h.fps {
		if fp == 0 {
			continue
		}
		live++
		i := h.find(fp)
		if i < 0 || int(h.index[i]) != pos+1 {
			return fmt.Errorf("fingerprint %#x at ring slot %d not found through the index", fp, pos)
		}
	}
	inIndex := 0
	for _, p := range h.index {
		if p != 0 {
			inIndex++
			if int(p) > len(h.fps) || h.fps[p-1] == 0 {
				return fmt.Errorf("index points at ring slot %d, a hole or out of range", p-1)
			}
		}
	}
	if live != h.live || inIndex != h.live {
		return fmt.Errorf("live %d, ring holds %d, index holds %d", h.live, live, inIndex)
	}
	return nil
}
