//go:build cgo

package main

/*
#include <stdlib.h>
#include "kvtier_store.h"
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// The multi-buffer batches (Mooncake's batch_*_multi_buffers): one key spread
// over several registered buffers, as vLLM lays a block out per layer.

// parts reads the flattened part lists of the multi-buffer calls: key i
// owns counts[i] consecutive entries of ptrs and sizes.
func parts(n int, counts *C.size_t, ptrs *unsafe.Pointer, sizes *C.size_t) ([][]unsafe.Pointer, [][]C.size_t, bool) {
	cs := unsafe.Slice(counts, n)
	total := 0
	for _, c := range cs {
		total += int(c)
	}
	ps, ss := unsafe.Slice(ptrs, total), unsafe.Slice(sizes, total)
	outP, outS := make([][]unsafe.Pointer, n), make([][]C.size_t, n)
	off := 0
	for i, c := range cs {
		outP[i], outS[i] = ps[off:off+int(c)], ss[off:off+int(c)]
		for j := range outP[i] {
			if outP[i][j] == nil && outS[i][j] > 0 {
				return nil, nil, false
			}
		}
		off += int(c)
	}
	return outP, outS, true
}

// useAll holds every part's registered region, or reports false (nothing
// held) when one part lies outside them.
func (r *registry) useAll(ps []unsafe.Pointer, ss []C.size_t) (func(), bool) {
	var dones []func()
	release := func() {
		for _, d := range dones {
			d()
		}
	}
	for j := range ps {
		d, ok := r.use(uintptr(ps[j]), uint64(ss[j]))
		if !ok {
			release()
			return nil, false
		}
		dones = append(dones, d)
	}
	return release, true
}

//export kvtier_go_batch_put_multi
func kvtier_go_batch_put_multi(h C.uintptr_t, keys **C.char, count C.size_t, counts *C.size_t, ptrs *unsafe.Pointer, sizes *C.size_t,
	cfg *C.mooncake_replicate_config_t, results *C.int) (ret C.int) {
	defer guard(&ret)
	if keys == nil || results == nil || (count > 0 && (counts == nil || ptrs == nil || sizes == nil)) {
		return codeInternalError
	}
	n := int(count)
	ks := unsafe.Slice(keys, n)
	for i := range n {
		if ks[i] == nil {
			return codeInternalError
		}
	}
	ps, ss, ok := parts(n, counts, ptrs, sizes)
	if !ok {
		return codeInternalError
	}
	out := unsafe.Slice(results, n)
	s, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	opts, code := putOptions(cfg)
	if code != codeOK {
		for i := range out {
			out[i] = C.int(code)
		}
		return codeOK
	}
	var bkeys []string
	var bvals [][]byte
	var idx []int
	for i := range n {
		done, ok := s.regs.useAll(ps[i], ss[i])
		if !ok || len(ps[i]) == 0 {
			out[i] = codeInvalidParams
			if ok {
				done()
			}
			continue
		}
		defer done()
		var v []byte
		if len(ps[i]) == 1 {
			v = cbytes(ps[i][0], ss[i][0]) // no copy
		} else {
			// The client writes one contiguous value: gather the parts
			// once.
			total := 0
			for _, sz := range ss[i] {
				total += int(sz)
			}
			v = make([]byte, 0, total)
			for j := range ps[i] {
				v = append(v, cbytes(ps[i][j], ss[i][j])...)
			}
		}
		bkeys = append(bkeys, C.GoString(ks[i]))
		bvals = append(bvals, v)
		idx = append(idx, i)
	}
	if len(bkeys) > 0 {
		for j, err := range c.BatchPut(context.Background(), bkeys, bvals, opts...) {
			out[idx[j]] = C.int(codeOf(err))
		}
	}
	return codeOK
}

//export kvtier_go_batch_get_multi
func kvtier_go_batch_get_multi(h C.uintptr_t, keys **C.char, count C.size_t, counts *C.size_t, ptrs *unsafe.Pointer, sizes *C.size_t, results *C.int64_t) (ret C.int) {
	defer guard(&ret)
	if keys == nil || results == nil || (count > 0 && (counts == nil || ptrs == nil || sizes == nil)) {
		return codeInternalError
	}
	n := int(count)
	names, ok := goKeys(keys, n)
	if !ok {
		return codeInternalError
	}
	ps, ss, ok := parts(n, counts, ptrs, sizes)
	if !ok {
		return codeInternalError
	}
	out := unsafe.Slice(results, n)
	s, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	parallel(n, func(i int) { out[i] = C.int64_t(getMulti(s, c, names[i], ps[i], ss[i])) })
	return codeOK
}

// getMulti reads key and spreads it over the parts in order: straight into
// a single part, through one scatter copy into several.
func getMulti(s *store, c *client.Client, key string, ps []unsafe.Pointer, ss []C.size_t) int64 {
	if len(ps) == 0 {
		return codeInvalidParams
	}
	done, ok := s.regs.useAll(ps, ss)
	if !ok {
		return codeInvalidParams
	}
	defer done()
	total := uint64(0)
	for _, sz := range ss {
		total += uint64(sz)
	}
	var tmp []byte
	n, err := c.GetWith(context.Background(), key, func(size uint64) ([]byte, error) {
		if size > total {
			return nil, kverr.New(kverr.InvalidParams, key, "buffers of %d bytes are smaller than the object (%d bytes)", total, size)
		}
		if len(ps) == 1 {
			return cbytes(ps[0], ss[0]), nil
		}
		tmp = make([]byte, size)
		return tmp, nil
	})
	if err != nil {
		return int64(codeOf(err))
	}
	if tmp != nil {
		rest := tmp[:n]
		for j := range ps {
			k := copy(cbytes(ps[j], ss[j]), rest)
			rest = rest[k:]
		}
	}
	return int64(n)
}
