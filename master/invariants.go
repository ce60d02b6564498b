package master

import (
	"cmp"
	"fmt"
	"slices"
)

// CheckInvariants verifies the master's internal consistency and returns the
// first violation. Call it when no operation is in flight (tests, fuzzing):
//   - every mounted segment's allocated bytes equal the aligned lengths of
//     the live replicas on it plus retired reservations awaiting release;
//   - no two of those ranges overlap;
//   - no replica lies on an unmounted segment;
//   - object, in-flight and per-segment replica counts match the maps, and
//     the DRAM index holds exactly the objects with a MEMORY replica;
//   - an in-flight object has only PROCESSING replicas, a complete one none;
//   - each shard's eviction history is within its limit and its index finds
//     exactly the remembered fingerprints (each once);
//   - each shard's disk index holds exactly its objects' LOCAL_DISK
//     replicas (node, bucket, key), at most one per node and object, and
//     only a node still re-registering has unconfirmed ones.
func (m *Master) CheckInvariants() error {
	for i := range m.shards {
		m.shards[i].mu.Lock()
	}
	defer func() {
		for i := range m.shards {
			m.shards[i].mu.Unlock()
		}
	}()
	m.abandonedMu.Lock()
	defer m.abandonedMu.Unlock()

	type rng struct {
		off, n uint64
		what   string
	}
	mounted := map[*segment]bool{}
	for _, s := range m.segs.all() {
		mounted[s] = true
	}
	ranges := map[*segment][]rng{}
	counts := map[*segment]int64{}
	var objects int64
	for i := range m.shards {
		sh := &m.shards[i]
		inflight, memObjects, diskReplicas := 0, 0, 0
		for k, o := range sh.objs {
			objects++
			t, key := splitCK(k)
			name := fmt.Sprintf("%s/%q", t, key)
			if len(o.replicas) == 0 {
				return fmt.Errorf("object %s has no replica", name)
			}
			if !o.complete {
				inflight++
				if sh.inflight[k] != o {
					return fmt.Errorf("in-flight object %s missing from the in-flight index", name)
				}
			}
			hasMem := slices.ContainsFunc(o.replicas, func(r replica) bool { return r.typ == Memory })
			indexed := o.memPos > 0 && int(o.memPos) <= len(sh.mem) && sh.mem[o.memPos-1] == memRef{k, o}
			if hasMem != indexed {
				return fmt.Errorf("object %s: holds DRAM %v, in the DRAM index %v (position %d)", name, hasMem, indexed, o.memPos)
			}
			if hasMem {
				memObjects++
			}
			for j := range o.replicas {
				r := &o.replicas[j]
				if o.complete != (r.state == Complete) {
					return fmt.Errorf("object %s complete=%v has a %v replica", name, o.complete, r.state)
				}
				if r.unconfirmed && (r.typ != LocalDisk || r.disk.registering.Load() == 0) {
					return fmt.Errorf("object %s has an unconfirmed %v replica outside a re-registration", name, r.typ)
				}
				if r.typ == LocalDisk {
					if r.disk == nil || ClientState(r.disk.state.Load()) == ClientGone {
						return fmt.Errorf("object %s has a disk replica of a gone client", name)
					}
					if _, ok := sh.disk[diskRef{r.disk, r.bucket}][k]; !ok {
						return fmt.Errorf("object %s: disk replica on %s bucket %d missing from the disk index", name, r.disk.id, r.bucket)
					}
					for _, q := range o.replicas[:j] {
						if q.typ == LocalDisk && q.disk == r.disk {
							return fmt.Errorf("object %s has two disk replicas on %s", name, r.disk.id)
						}
					}
					diskReplicas++
					continue
				}
				if !mounted[r.seg] || r.seg.removed.Load() {
					return fmt.Errorf("object %s has a %v replica on unmounted segment %s", name, r.state, r.seg.spec.Name)
				}
				ranges[r.seg] = append(ranges[r.seg], rng{r.offset, r.allocLen(), name})
				counts[r.seg]++
			}
		}
		indexed := 0
		for ref, set := range sh.disk {
			if len(set) == 0 {
				return fmt.Errorf("shard %d: empty disk index set for %s bucket %d", i, ref.node.id, ref.bucket)
			}
			indexed += len(set)
		}
		if indexed != diskReplicas {
			return fmt.Errorf("shard %d: %d disk replicas, the disk index has %d entries", i, diskReplicas, indexed)
		}
		if memObjects != len(sh.mem) {
			return fmt.Errorf("shard %d: %d objects hold DRAM, the DRAM index has %d entries", i, memObjects, len(sh.mem))
		}
		if inflight != len(sh.inflight) {
			return fmt.Errorf("shard %d: %d in-flight objects, index holds %d", i, inflight, len(sh.inflight))
		}
		if err := sh.hist.check(); err != nil {
			return fmt.Errorf("shard %d: eviction history: %w", i, err)
		}
	}
	if objects != m.nObjects.Load() {
		return fmt.Errorf("object count %d, maps hold %d", m.nObjects.Load(), objects)
	}
	for _, r := range m.abandoned {
		if mounted[r.seg] && !r.seg.removed.Load() {
			ranges[r.seg] = append(ranges[r.seg], rng{r.off, r.n, "retired reservation"})
		}
	}
	for s := range mounted {
		rs := ranges[s]
		slices.SortFunc(rs, func(a, b rng) int { return cmp.Compare(a.off, b.off) })
		var sum uint64
		for i, r := range rs {
			sum += r.n
			if i > 0 && rs[i-1].off+rs[i-1].n > r.off {
				return fmt.Errorf("segment %s: %s [%d,+%d) overlaps %s [%d,+%d)", s.spec.Name, rs[i-1].what, rs[i-1].off, rs[i-1].n, r.what, r.off, r.n)
			}
			if r.off+r.n > s.alloc.total {
				return fmt.Errorf("segment %s: %s ends past the segment", s.spec.Name, r.what)
			}
		}
		s.mu.Lock()
		used := s.alloc.used()
		s.mu.Unlock()
		if used != sum {
			return fmt.Errorf("segment %s: allocator holds %d bytes, live replicas %d", s.spec.Name, used, sum)
		}
		if got := s.replicas.Load(); got != counts[s] {
			return fmt.Errorf("segment %s: replica count %d, actual %d", s.spec.Name, got, counts[s])
		}
	}
	return nil
}
