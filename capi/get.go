//go:build cgo

package main

/*
#include <stdlib.h>
#include "kvtier_store.h"
*/
import "C"

import (
	"context"
	"sync"
	"unsafe"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// The get calls: into registered buffers, or into memory the library allocates.

//export kvtier_go_get_into
func kvtier_go_get_into(h C.uintptr_t, key *C.char, buffer unsafe.Pointer, size C.size_t) (ret C.int64_t) {
	defer guard(&ret)
	if key == nil || (buffer == nil && size > 0) {
		return codeInternalError
	}
	s, c, release, code := acquire(h)
	if code != codeOK {
		return C.int64_t(code)
	}
	defer release()
	return C.int64_t(getInto(s, c, C.GoString(key), buffer, size))
}

func getInto(s *store, c *client.Client, key string, buffer unsafe.Pointer, size C.size_t) int64 {
	done, ok := s.regs.use(uintptr(buffer), uint64(size))
	if !ok {
		return codeInvalidParams
	}
	defer done()
	n, err := c.GetInto(context.Background(), key, cbytes(buffer, size))
	if err != nil {
		return int64(codeOf(err))
	}
	return int64(n)
}

// batchWorkers bounds the Gets one batch runs at once: enough to overlap
// the master round trips of a batch, few enough not to flood it.
const batchWorkers = 16

// parallel runs f(i) for i in [0, n) on up to batchWorkers goroutines.
func parallel(n int, f func(i int)) {
	w := min(n, batchWorkers)
	if w <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for {
				next.Lock()
				j := i
				i++
				next.Unlock()
				if j >= n {
					return
				}
				f(j)
			}
		})
	}
	wg.Wait()
}

//export kvtier_go_batch_get_into
func kvtier_go_batch_get_into(h C.uintptr_t, keys **C.char, buffers *unsafe.Pointer, sizes *C.size_t, count C.size_t, results *C.int64_t) (ret C.int) {
	defer guard(&ret)
	if keys == nil || buffers == nil || sizes == nil || results == nil {
		return codeInternalError
	}
	n := int(count)
	names, ok := goKeys(keys, n)
	bs, ss := unsafe.Slice(buffers, n), unsafe.Slice(sizes, n)
	for i := range n {
		ok = ok && (bs[i] != nil || ss[i] == 0)
	}
	if !ok {
		return codeInternalError
	}
	out := unsafe.Slice(results, n)
	s, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	parallel(n, func(i int) { out[i] = C.int64_t(getInto(s, c, names[i], bs[i], ss[i])) })
	return codeOK
}

//export kvtier_go_get_alloc
func kvtier_go_get_alloc(h C.uintptr_t, key *C.char, outp *unsafe.Pointer) (ret C.int64_t) {
	defer guard(&ret)
	if key == nil || outp == nil {
		return codeInternalError
	}
	*outp = nil
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int64_t(code)
	}
	defer release()
	p, n := getAlloc(c, C.GoString(key))
	*outp = p
	return C.int64_t(n)
}

// getAlloc reads key into C memory it allocates (freed by kvtier_free).
func getAlloc(c *client.Client, key string) (unsafe.Pointer, int64) {
	var p unsafe.Pointer
	free := func() {
		if p != nil {
			C.free(p)
			p = nil
		}
	}
	n, err := c.GetWith(context.Background(), key, func(size uint64) ([]byte, error) {
		free()
		p = C.malloc(C.size_t(max(size, 1)))
		if p == nil {
			return nil, kverr.New(kverr.InternalError, key, "cannot allocate %d bytes", size)
		}
		return unsafe.Slice((*byte)(p), int(size)), nil
	})
	if err != nil {
		free()
		return nil, int64(codeOf(err))
	}
	return p, int64(n)
}

//export kvtier_go_batch_get_alloc
func kvtier_go_batch_get_alloc(h C.uintptr_t, keys **C.char, count C.size_t, outs *unsafe.Pointer, results *C.int64_t) (ret C.int) {
	defer guard(&ret)
	if keys == nil || outs == nil || results == nil {
		return codeInternalError
	}
	n := int(count)
	names, ok := goKeys(keys, n)
	if !ok {
		return codeInternalError
	}
	ps, out := unsafe.Slice(outs, n), unsafe.Slice(results, n)
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	clear(ps)
	parallel(n, func(i int) {
		p, r := getAlloc(c, names[i])
		ps[i], out[i] = p, C.int64_t(r)
	})
	return codeOK
}
