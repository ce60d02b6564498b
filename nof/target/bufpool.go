package target

import (
	"math/bits"
	"sync"

	"github.com/kvtier/kvtier/nof/namespace"
)

// bufPool hands out Align-aligned buffers in power-of-two classes from 4 KiB
// up to the largest transfer, so direct I/O needs no bounce buffer.
type bufPool struct {
	max   int
	pools []sync.Pool // class i holds *[]byte of cap 4096<<i
}

func (p *bufPool) init(maxTransfer int) {
	p.max = max(maxTransfer, 8192)
	n := bits.Len(uint(p.max/4096-1)) + 1
	p.pools = make([]sync.Pool, n)
}

func class(n int) int {
	if n <= 4096 {
		return 0
	}
	return bits.Len(uint((n - 1) / 4096))
}

// get returns a buffer of length n (n <= max uses the pool).
func (p *bufPool) get(n int) []byte {
	c := class(n)
	if c >= len(p.pools) {
		return namespace.AlignedBuffer(n)
	}
	if v := p.pools[c].Get(); v != nil {
		return (*v.(*[]byte))[:n]
	}
	b := namespace.AlignedBuffer(4096 << c)
	return b[:n:len(b)]
}

// put returns b to the pool; b must come from get and no longer be in use.
func (p *bufPool) put(b []byte) {
	c := class(cap(b))
	if cap(b) != 4096<<c || c >= len(p.pools) {
		return
	}
	full := b[:cap(b)] // a fresh variable: only a real put allocates its *[]byte
	p.pools[c].Put(&full)
}
