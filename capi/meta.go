//go:build cgo

package main

/*
#include <stdlib.h>
#include "kvtier_store.h"
*/
import "C"

import (
	"context"
	"slices"
	"unsafe"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// Existence, size, hostname, removal and buffer registration.

//export kvtier_go_is_exist
func kvtier_go_is_exist(h C.uintptr_t, key *C.char) (ret C.int) {
	defer guard(&ret)
	if key == nil {
		return codeInternalError
	}
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	ok, err := c.Exist(context.Background(), C.GoString(key))
	switch {
	case err != nil:
		return C.int(codeOf(err))
	case ok:
		return 1
	}
	return 0
}

//export kvtier_go_batch_is_exist
func kvtier_go_batch_is_exist(h C.uintptr_t, keys **C.char, count C.size_t, results *C.int) (ret C.int) {
	defer guard(&ret)
	if keys == nil || results == nil {
		return codeInternalError
	}
	n := int(count)
	names, ok := goKeys(keys, n)
	if !ok {
		return codeInternalError
	}
	out := unsafe.Slice(results, n)
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	exists, errs := c.BatchExistEach(context.Background(), names)
	for i := range out {
		switch {
		case errs[i] != nil:
			out[i] = C.int(codeOf(errs[i]))
		case exists[i]:
			out[i] = 1
		default:
			out[i] = 0
		}
	}
	return codeOK
}

//export kvtier_go_get_size
func kvtier_go_get_size(h C.uintptr_t, key *C.char) (ret C.int64_t) {
	defer guard(&ret)
	if key == nil {
		return codeInternalError
	}
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int64_t(code)
	}
	defer release()
	info, err := c.Stat(context.Background(), C.GoString(key))
	if err != nil {
		return C.int64_t(codeOf(err))
	}
	// Only a readable object has a size to report (as Mooncake's, which
	// asks for the complete replicas).
	if !slices.ContainsFunc(info.Replicas, func(r *kvtierpb.Replica) bool { return r.State == kvtierpb.ReplicaState_COMPLETE }) {
		return codeReplicaIsNotReady
	}
	return C.int64_t(info.Size)
}

//export kvtier_go_get_hostname
func kvtier_go_get_hostname(h C.uintptr_t, buf *C.char, n C.size_t) (ret C.int) {
	defer guard(&ret)
	if buf == nil || n == 0 {
		return codeInternalError
	}
	s := lookup(h)
	if s == nil {
		return codeInternalError
	}
	s.mu.Lock()
	name := s.hostname
	s.mu.Unlock()
	if len(name) >= int(n) {
		return codeInternalError
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	copy(dst, name)
	dst[len(name)] = 0
	return codeOK
}

//export kvtier_go_remove
func kvtier_go_remove(h C.uintptr_t, key *C.char, force C.int) (ret C.int) {
	defer guard(&ret)
	if key == nil {
		return codeInternalError
	}
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	return C.int(codeOf(c.Remove(context.Background(), C.GoString(key), force != 0)))
}

//export kvtier_go_batch_remove
func kvtier_go_batch_remove(h C.uintptr_t, keys **C.char, count C.size_t, force C.int, results *C.int) (ret C.int) {
	defer guard(&ret)
	if keys == nil || results == nil {
		return codeInternalError
	}
	n := int(count)
	names, ok := goKeys(keys, n)
	if !ok {
		return codeInternalError
	}
	out := unsafe.Slice(results, n)
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	for i, err := range c.BatchRemove(context.Background(), names, force != 0) {
		out[i] = C.int(codeOf(err))
	}
	return codeOK
}

//export kvtier_go_remove_by_regex
func kvtier_go_remove_by_regex(h C.uintptr_t, pattern *C.char, force C.int) (ret C.int64_t) {
	defer guard(&ret)
	if pattern == nil {
		return codeInternalError
	}
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int64_t(code)
	}
	defer release()
	n, err := c.RemoveByRegex(context.Background(), C.GoString(pattern), force != 0)
	if err != nil {
		return C.int64_t(codeOf(err))
	}
	return C.int64_t(n)
}

//export kvtier_go_remove_all
func kvtier_go_remove_all(h C.uintptr_t, force C.int) (ret C.int64_t) {
	defer guard(&ret)
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int64_t(code)
	}
	defer release()
	n, err := c.RemoveAll(context.Background(), force != 0)
	if err != nil {
		return C.int64_t(codeOf(err))
	}
	return C.int64_t(n)
}

//export kvtier_go_register_buffer
func kvtier_go_register_buffer(h C.uintptr_t, buffer unsafe.Pointer, size C.size_t) (ret C.int) {
	defer guard(&ret)
	s := lookup(h)
	if s == nil {
		return codeInternalError
	}
	if buffer == nil || size == 0 {
		return codeInvalidParams
	}
	return C.int(s.regs.register(uintptr(buffer), uint64(size)))
}

//export kvtier_go_unregister_buffer
func kvtier_go_unregister_buffer(h C.uintptr_t, buffer unsafe.Pointer) (ret C.int) {
	defer guard(&ret)
	s := lookup(h)
	if s == nil {
		return codeInternalError
	}
	return C.int(s.regs.unregister(uintptr(buffer)))
}
