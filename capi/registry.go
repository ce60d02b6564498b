//go:build cgo

package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"sync"
)

// registry holds the buffers a handle's zero-copy calls may read or write:
// [base, base+size) ranges of the caller's memory, registered with
// mooncake_store_register_buffer. Engines register a few large buffers, so a
// scan is as fast as an index.
type registry struct {
	mu sync.Mutex
	// guarded by mu:
	regions []*region
}

type region struct {
	base, size uint64
	// users counts calls transferring into or out of the region; Add only
	// happens under registry.mu while the region is listed, so once it is
	// unlisted Wait sees every user.
	users sync.WaitGroup
}

func (r *registry) register(base uintptr, size uint64) int {
	if uint64(base)+size < uint64(base) {
		return codeInvalidParams // wraps around the address space
	}
	r.mu.Lock()
	for _, g := range r.regions {
		if g.base == uint64(base) && g.size == size {
			r.mu.Unlock()
			return codeOK // registering the same buffer twice is harmless
		}
	}
	r.mu.Unlock()
	if !mappedRW(uint64(base), size) {
		// Not host memory this process may read and write: a stray
		// pointer, or GPU memory (a CUDA allocation is a PROT_NONE
		// reservation in the CPU's view). Copying from it would crash.
		return codeInvalidParams
	}
	// A different size at an address already registered is memory the
	// caller freed and allocated again (Python does this all the time):
	// the new registration replaces the old once its transfers end.
	r.unregister(base)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.regions = append(r.regions, &region{base: uint64(base), size: size})
	return codeOK
}

// unregister forgets the region starting at base and waits for the calls
// using it to end, so the caller may free the memory once it returns.
func (r *registry) unregister(base uintptr) int {
	r.mu.Lock()
	var g *region
	for i, x := range r.regions {
		if x.base == uint64(base) {
			g = x
			r.regions = append(r.regions[:i], r.regions[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
	if g == nil {
		return codeInvalidParams
	}
	g.users.Wait()
	return codeOK
}

// use reports whether [p, p+n) lies inside one registered region and, if so,
// holds that region until done is called.
func (r *registry) use(p uintptr, n uint64) (done func(), ok bool) {
	lo := uint64(p)
	hi := lo + n
	if hi < lo || p == 0 {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.regions {
		if lo >= g.base && hi <= g.base+g.size {
			g.users.Add(1)
			return g.users.Done, true
		}
	}
	return nil, false
}

// mappedRW reports whether [base, base+size) is covered by mappings of this
// process that are readable and writable (/proc/self/maps). Registration
// is rare, so reading the map each time is cheap enough; when the file
// cannot be read the range is trusted.
func mappedRW(base, size uint64) bool {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return true
	}
	defer f.Close()
	pos, end := base, base+size
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() && pos < end {
		// "start-end perms offset dev inode path", addresses in hex,
		// lines sorted by address.
		line := sc.Bytes()
		dash := bytes.IndexByte(line, '-')
		sp := bytes.IndexByte(line, ' ')
		if dash < 0 || sp < dash || len(line) < sp+3 {
			continue
		}
		lo, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
		hi, err2 := strconv.ParseUint(string(line[dash+1:sp]), 16, 64)
		if err1 != nil || err2 != nil || hi <= pos {
			continue
		}
		if lo > pos {
			return false // a hole before the next mapping
		}
		if line[sp+1] != 'r' || line[sp+2] != 'w' {
			return false
		}
		pos = hi
	}
	return pos >= end
}
