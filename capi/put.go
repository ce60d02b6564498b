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
)

// The put calls: one key or a batch, from any memory or from registered buffers.

// putOptions converts a replicate config (NULL: defaults).
func putOptions(cfg *C.mooncake_replicate_config_t) ([]client.PutOption, int) {
	if cfg == nil {
		return nil, codeOK
	}
	var o client.PutOptions
	o.Replicas = int(cfg.replica_num)
	o.SoftPin = cfg.with_soft_pin != 0
	o.HardPin = cfg.with_hard_pin != 0
	if cfg.preferred_segments_count > 0 {
		if cfg.preferred_segments == nil {
			return nil, codeInvalidParams
		}
		segs := unsafe.Slice(cfg.preferred_segments, int(cfg.preferred_segments_count))
		if segs[0] != nil {
			o.PreferredSegment = C.GoString(segs[0])
		}
	}
	return []client.PutOption{client.WithOptions(o)}, codeOK
}

// cbytes views size bytes of C memory at p as a slice, without a copy.
func cbytes(p unsafe.Pointer, size C.size_t) []byte {
	if size == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(p), int(size))
}

// goKeys copies the n C strings at keys into Go strings; ok is false when
// any of them is NULL (the caller answers INTERNAL_ERROR, as Mooncake does).
func goKeys(keys **C.char, n int) (names []string, ok bool) {
	ks := unsafe.Slice(keys, n)
	names = make([]string, n)
	for i, k := range ks {
		if k == nil {
			return nil, false
		}
		names[i] = C.GoString(k)
	}
	return names, true
}

//export kvtier_go_put
func kvtier_go_put(h C.uintptr_t, key *C.char, value unsafe.Pointer, size C.size_t, cfg *C.mooncake_replicate_config_t, registered C.int) (ret C.int) {
	defer guard(&ret)
	if key == nil || (value == nil && size > 0) {
		return codeInternalError
	}
	s, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	opts, code := putOptions(cfg)
	if code != codeOK {
		return C.int(code)
	}
	if registered != 0 {
		done, ok := s.regs.use(uintptr(value), uint64(size))
		if !ok {
			return codeInvalidParams
		}
		defer done()
	}
	return C.int(codeOf(c.Put(context.Background(), C.GoString(key), cbytes(value, size), opts...)))
}

//export kvtier_go_batch_put
func kvtier_go_batch_put(h C.uintptr_t, keys **C.char, buffers *unsafe.Pointer, sizes *C.size_t, count C.size_t,
	cfg *C.mooncake_replicate_config_t, results *C.int, registered C.int) (ret C.int) {
	defer guard(&ret)
	if keys == nil || buffers == nil || sizes == nil || results == nil {
		return codeInternalError
	}
	n := int(count)
	ks, bs, ss := unsafe.Slice(keys, n), unsafe.Slice(buffers, n), unsafe.Slice(sizes, n)
	for i := range n {
		if ks[i] == nil || (bs[i] == nil && ss[i] > 0) {
			return codeInternalError
		}
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
	// Keys whose buffer is not registered fail on their own; the rest go
	// in one batch.
	var bkeys []string
	var bvals [][]byte
	var idx []int
	for i := range n {
		if registered != 0 {
			done, ok := s.regs.use(uintptr(bs[i]), uint64(ss[i]))
			if !ok {
				out[i] = codeInvalidParams
				continue
			}
			defer done()
		}
		bkeys = append(bkeys, C.GoString(ks[i]))
		bvals = append(bvals, cbytes(bs[i], ss[i]))
		idx = append(idx, i)
	}
	if len(bkeys) > 0 {
		for j, err := range c.BatchPut(context.Background(), bkeys, bvals, opts...) {
			out[idx[j]] = C.int(codeOf(err))
		}
	}
	return codeOK
}
