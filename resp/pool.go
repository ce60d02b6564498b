package resp

import (
	"math/bits"
	"sync"
)

// Value buffers come from power-of-two size classes between 4 KiB and
// 64 MiB; a value above that gets a buffer of its own (rare, and keeping
// such buffers would pin that much memory per class).
const (
	minClassShift = 12 // 4 KiB
	maxClassShift = 26 // 64 MiB
	nClasses      = maxClassShift - minClassShift + 1
	// poolBytesPerClass bounds the idle memory one class keeps; a class
	// keeps at least poolMinPerClass buffers and at most poolMaxPerClass.
	poolBytesPerClass = 128 << 20
	poolMinPerClass   = 4
	poolMaxPerClass   = 1024
)

// buffer is a pooled value buffer.
type buffer struct{ b []byte }

// bufPool recycles value buffers across requests and connections, so a
// 1 MiB SET or GET costs no 1 MiB heap allocation once the pool is warm.
// Free lists rather than sync.Pool: sync.Pool empties at every other
// garbage collection, and with a small live heap each 1 MiB allocation
// brings the next collection closer, so under load the pool emptied
// itself about as fast as it filled and every request allocated again.
type bufPool struct {
	classes [nClasses]struct {
		mu   sync.Mutex // guards free
		free []*buffer
	}
}

func classOf(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minClassShift
}

func perClass(c int) int {
	return min(max(poolBytesPerClass>>(c+minClassShift), poolMinPerClass), poolMaxPerClass)
}

// get returns a buffer whose b has length n.
func (p *bufPool) get(n int) *buffer {
	c := classOf(n)
	if c >= nClasses {
		return &buffer{b: make([]byte, n)}
	}
	cl := &p.classes[c]
	cl.mu.Lock()
	if k := len(cl.free); k > 0 {
		b := cl.free[k-1]
		cl.free[k-1] = nil
		cl.free = cl.free[:k-1]
		cl.mu.Unlock()
		b.b = b.b[:n]
		return b
	}
	cl.mu.Unlock()
	return &buffer{b: make([]byte, n, 1<<(c+minClassShift))}
}

// put gives b back (nil is ignored); it must not be used afterwards.
func (p *bufPool) put(b *buffer) {
	if b == nil {
		return
	}
	c := classOf(cap(b.b))
	if c >= nClasses || cap(b.b) != 1<<(c+minClassShift) {
		return // an oversized one-off: let the GC have it
	}
	cl := &p.classes[c]
	cl.mu.Lock()
	if len(cl.free) < perClass(c) {
		cl.free = append(cl.free, b)
	}
	cl.mu.Unlock()
}
