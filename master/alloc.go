package master

import "github.com/google/btree"

// extent is a free byte range [off, off+size) of a segment.
type extent struct{ off, size uint64 }

func lessBySize(a, b extent) bool {
	if a.size != b.size {
		return a.size < b.size
	}
	return a.off < b.off
}

func lessByOff(a, b extent) bool { return a.off < b.off }

// allocator is a best-fit offset allocator over one segment. Free extents are
// kept twice: ordered by (size, offset) for best fit and by offset for
// coalescing neighbours. Every allocation is a multiple of align and starts at
// a multiple of align. Not safe for concurrent use: the segment's mutex guards it.
type allocator struct {
	bySize *btree.BTreeG[extent]
	byOff  *btree.BTreeG[extent]
	align  uint64
	total  uint64 // usable bytes (size rounded down to align)
	free   uint64
}

func newAllocator(size, align uint64) *allocator {
	if align == 0 {
		align = 1
	}
	a := &allocator{
		bySize: btree.NewG(16, lessBySize),
		byOff:  btree.NewG(16, lessByOff),
		align:  align,
		total:  size / align * align,
	}
	if a.total > 0 {
		a.insert(extent{0, a.total})
		a.free = a.total
	}
	return a
}

func (a *allocator) insert(e extent) {
	a.bySize.ReplaceOrInsert(e)
	a.byOff.ReplaceOrInsert(e)
}

func (a *allocator) remove(e extent) {
	a.bySize.Delete(e)
	a.byOff.Delete(e)
}

// roundUp returns n rounded up to the allocator's alignment (0 on overflow).
func (a *allocator) roundUp(n uint64) uint64 {
	r := (n + a.align - 1) / a.align * a.align
	if r < n {
		return 0
	}
	return r
}

// alloc reserves n bytes (rounded up to align) in the smallest free extent
// that fits. It returns the offset and the reserved length.
func (a *allocator) alloc(n uint64) (off, length uint64, ok bool) {
	length = a.roundUp(n)
	if n == 0 || length == 0 || length > a.free {
		return 0, 0, false
	}
	var best extent
	found := false
	a.bySize.AscendGreaterOrEqual(extent{size: length}, func(e extent) bool {
		best, found = e, true
		return false
	})
	if !found {
		return 0, 0, false
	}
	a.remove(best)
	if best.size > length {
		a.insert(extent{best.off + length, best.size - length})
	}
	a.free -= length
	return best.off, length, true
}

// release returns [off, off+length) to the free set, coalescing neighbours.
// It reports false (and changes nothing) if the range is not wholly allocated.
func (a *allocator) release(off, length uint64) bool {
	if length == 0 || off+length > a.total || off+length < off {
		return false
	}
	e := extent{off, length}
	var prev, next extent
	hasPrev, hasNext := false, false
	a.byOff.DescendLessOrEqual(extent{off: off}, func(x extent) bool {
		prev, hasPrev = x, true
		return false
	})
	a.byOff.AscendGreaterOrEqual(extent{off: off}, func(x extent) bool {
		next, hasNext = x, true
		return false
	})
	if hasPrev && prev.off+prev.size > off {
		return false // overlaps a free extent: double free
	}
	if hasNext && next.off < off+length {
		return false
	}
	if hasPrev && prev.off+prev.size == off {
		a.remove(prev)
		e = extent{prev.off, prev.size + e.size}
	}
	if hasNext && next.off == off+length {
		a.remove(next)
		e.size += next.size
	}
	a.insert(e)
	a.free += length
	return true
}

// largest returns the size of the largest free extent.
func (a *allocator) largest() uint64 {
	if e, ok := a.bySize.Max(); ok {
		return e.size
	}
	return 0
}

func (a *allocator) used() uint64 { return a.total - a.free }
