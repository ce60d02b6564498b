package ssd

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/ncw/directio"
)

// alignedPool hands out Block-aligned buffers for O_DIRECT I/O in power-of-two
// size classes from 4 KiB to 64 MiB; larger requests are allocated directly.
// One pool per Tier (no package-level state).
type alignedPool struct {
	classes [numClasses]sync.Pool // class i holds *[]byte of Block<<i bytes
}

const numClasses = 15 // 4 KiB << 14 = 64 MiB

func sizeClass(n int) int {
	if n <= Block {
		return 0
	}
	return bits.Len(uint(n-1)) - 12
}

// get returns an aligned buffer of length n (n a multiple of Block). Its
// contents are arbitrary.
func (p *alignedPool) get(n int) []byte {
	c := sizeClass(n)
	if c >= numClasses {
		return directio.AlignedBlock(n)
	}
	if v := p.classes[c].Get(); v != nil {
		return (*v.(*[]byte))[:n]
	}
	size := Block << c
	return directio.AlignedBlock(size)[:n:size]
}

func (p *alignedPool) put(b []byte) {
	c := sizeClass(cap(b))
	if c >= numClasses || cap(b) != Block<<c {
		return
	}
	b = b[:cap(b)]
	p.classes[c].Put(&b)
}

// isAligned reports whether b starts on a Block boundary in memory.
func isAligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(Block-1) == 0
}

// writeData writes value at off, padded with zeros to need bytes, with
// O_DIRECT: straight from value when it is Block-aligned in memory (the
// appliance's segments are), through a pooled aligned buffer otherwise.
func (t *Tier) writeData(f File, off uint64, value []byte, need uint64) error {
	n := len(value)
	full := n &^ (Block - 1)
	if full > 0 && isAligned(value) {
		if _, err := f.WriteAt(value[:full], int64(off)); err != nil {
			return err
		}
		if tail := n - full; tail > 0 {
			buf := t.bufs.get(Block)
			defer t.bufs.put(buf)
			copy(buf, value[full:])
			clear(buf[tail:])
			if _, err := f.WriteAt(buf, int64(off)+int64(full)); err != nil {
				return err
			}
		}
		return nil
	}
	buf := t.bufs.get(int(need))
	defer t.bufs.put(buf)
	copy(buf, value)
	clear(buf[n:])
	_, err := f.WriteAt(buf, int64(off))
	return err
}

// readData reads len(dst) bytes at off with O_DIRECT (the padded last block
// through a small aligned buffer).
func (t *Tier) readData(f File, off uint64, dst []byte) error {
	n := len(dst)
	full := n &^ (Block - 1)
	if full > 0 && isAligned(dst) {
		if _, err := f.ReadAt(dst[:full], int64(off)); err != nil {
			return err
		}
		if tail := n - full; tail > 0 {
			buf := t.bufs.get(Block)
			defer t.bufs.put(buf)
			if _, err := f.ReadAt(buf, int64(off)+int64(full)); err != nil {
				return err
			}
			copy(dst[full:], buf)
		}
		return nil
	}
	buf := t.bufs.get(int(padded(uint64(n))))
	defer t.bufs.put(buf)
	if _, err := f.ReadAt(buf, int64(off)); err != nil {
		return err
	}
	copy(dst, buf)
	return nil
}
