package resp

import (
	"math/bits"
	"sync"
)

// Value buffers come from power-of-two size classes between minClass and
// maxClass bytes; a value above maxClass gets a buffer of its own (rare, and
// a pool of them would pin that much memory per class).
const (
	minClassShift = 12 // 4 KiB
	maxClassShift = 26 // 64 MiB
	nClasses      = maxClassShift - minClassShift + 1
)

// buffer is a pooled value buffer. The pool holds *buffer so that putting
// one back allocates nothing.
type buffer struct{ b []byte }

// bufPool recycles value buffers across requests and connections, so a
// 1 MiB SET or GET costs no 1 MiB heap allocation (and no GC work) once the
// pool is warm.
type bufPool struct {
	classes [nClasses]sync.Pool
}

func classOf(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minClassShift
}

// get returns a buffer whose b has length n.
func (p *bufPool) get(n int) *buffer {
	c := classOf(n)
	if c >= nClasses {
		return &buffer{b: make([]byte, n)}
	}
	if v := p.classes[c].Get(); v != nil {
		b := v.(*buffer)
		b.b = b.b[:n]
		return b
	}
	return &buffer{b: make([]byte, n, 1<<(c+minClassShift))}
}

// put gives b back; it must not be used afterwards.
func (p *bufPool) put(b *buffer) {
	if b == nil {
		return
	}
	c := classOf(cap(b.b))
	if c >= nClasses || cap(b.b) != 1<<(c+minClassShift) {
		return // an oversized one-off: let the GC have it
	}
	p.classes[c].Put(b)
}
