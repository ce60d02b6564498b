//go:build cgo

package main

/*
#include <stdlib.h>
#include <string.h>
#include "kvtier_store.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"unsafe"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// store is the state behind one handle.
type store struct {
	mu sync.Mutex
	// guarded by mu:
	c        *client.Client // nil until setup
	tenant   string         // set before setup (kvtier_store_set_tenant); "" is the default tenant
	hostname string
	closed   bool           // no new calls: destroyed, or setup in progress
	gone     bool           // destroyed
	inflight sync.WaitGroup // calls using c; destroy waits for them

	regs registry
}

// handles maps the numbers C holds to stores. A C ABI needs this process-wide
// table: a handle is an integer, valid on every thread.
var handles struct {
	mu   sync.Mutex
	next uintptr
	m    map[uintptr]*store
}

func lookup(h C.uintptr_t) *store {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	return handles.m[uintptr(h)]
}

// acquire returns the set-up client behind h and a release function, or a
// C code: -1 for an unknown or closed handle (Mooncake's answer to a NULL
// one), -600 before setup.
func acquire(h C.uintptr_t) (*store, *client.Client, func(), int) {
	s := lookup(h)
	if s == nil {
		return nil, nil, nil, codeInternalError
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, nil, codeInternalError
	}
	if s.c == nil {
		return nil, nil, nil, codeInvalidParams
	}
	s.inflight.Add(1)
	return s, s.c, s.inflight.Done, codeOK
}

// guard turns a panic in an export into INTERNAL_ERROR: a Go panic must not
// take down the C or Python process that loaded the library.
func guard[T ~int32 | ~int64](ret *T) {
	if r := recover(); r != nil {
		fmt.Fprintf(os.Stderr, "kvtier: internal error: %v\n", r)
		*ret = T(codeInternalError)
	}
}

//export kvtier_go_create
func kvtier_go_create() C.uintptr_t {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	if handles.m == nil {
		handles.m = map[uintptr]*store{}
		// Start far from 0 so a handle never looks like a small pointer
		// or a count.
		handles.next = 0x6b760000
	}
	handles.next++
	handles.m[handles.next] = &store{}
	return C.uintptr_t(handles.next)
}

//export kvtier_go_destroy
func kvtier_go_destroy(h C.uintptr_t) {
	defer func() { _ = recover() }()
	handles.mu.Lock()
	s := handles.m[uintptr(h)]
	delete(handles.m, uintptr(h))
	handles.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed, s.gone = true, true
	c := s.c
	s.mu.Unlock()
	s.inflight.Wait()
	if c != nil {
		_ = c.Close()
	}
}

// cstr reads an optional C string ("" for NULL).
func cstr(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

//export kvtier_go_setup
func kvtier_go_setup(h C.uintptr_t, localHostname, metadataServer *C.char, globalSegmentSize, localBufferSize C.uint64_t,
	protocol, deviceName, masterAddr *C.char) (ret C.int) {
	defer guard(&ret)
	return C.int(setup(h, cstr(localHostname), uint64(globalSegmentSize), uint64(localBufferSize), cstr(protocol), cstr(masterAddr)))
}

//export kvtier_go_init_all
func kvtier_go_init_all(h C.uintptr_t, protocol, deviceName *C.char, mountSegmentSize C.uint64_t) (ret C.int) {
	defer guard(&ret)
	master := os.Getenv("KVTIER_MASTER")
	if master == "" {
		master = "127.0.0.1:50051" // Mooncake's default master address
	}
	return C.int(setup(h, "localhost", uint64(mountSegmentSize), 0, cstr(protocol), master))
}

// setup connects handle h. metadata_server and device_name have no meaning
// for kvtier (its master is the only metadata service; TCP needs no device).
func setup(h C.uintptr_t, localHostname string, globalSegment, localBuffer uint64, protocol, masterAddr string) int {
	s := lookup(h)
	if s == nil {
		return codeInternalError
	}
	switch protocol {
	case "", "tcp":
	default:
		fmt.Fprintf(os.Stderr, "kvtier: setup: protocol %q is not available in this library; use \"tcp\"\n", protocol)
		return codeInvalidParams
	}
	if masterAddr == "" {
		masterAddr = "127.0.0.1:50051"
	}
	host := localHostname
	if host == "" {
		host = "localhost"
	}
	cfg := client.Config{MasterAddr: masterAddr, GlobalSegmentSize: globalSegment, LocalBufferSize: localBuffer}
	if globalSegment > 0 {
		// Serve the segment at local_hostname (a free port unless it
		// names one), as Mooncake's transfer engine does.
		if _, _, err := net.SplitHostPort(host); err == nil {
			cfg.DataAddr = host
		} else {
			cfg.DataAddr = net.JoinHostPort(host, "0")
		}
	}
	s.mu.Lock()
	if s.c != nil || s.closed {
		s.mu.Unlock()
		fmt.Fprintln(os.Stderr, "kvtier: setup: this store is already set up")
		return codeInvalidParams
	}
	cfg.Tenant = s.tenant
	// Hold the handle busy while connecting, so a concurrent setup or
	// destroy cannot interleave.
	s.closed = true
	s.mu.Unlock()
	c, err := client.New(context.Background(), cfg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone { // destroyed while connecting
		if c != nil {
			_ = c.Close()
		}
		return codeInternalError
	}
	s.closed = false
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvtier: setup: %v\n", err)
		return codeOf(err)
	}
	s.c = c
	s.hostname = host
	if ep := c.Endpoint(); ep != "" {
		s.hostname = ep
	}
	return codeOK
}

//export kvtier_go_health_check
func kvtier_go_health_check(h C.uintptr_t) (ret C.int) {
	defer guard(&ret)
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	// An existence probe is the cheapest call that needs a working master
	// (it takes no lease).
	_, err := c.Exist(context.Background(), "__kvtier_health_check__")
	return C.int(codeOf(err))
}

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
	names := make([]string, n)
	for i := range n {
		names[i] = C.GoString(ks[i])
	}
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
	ks := unsafe.Slice(keys, n)
	for i := range n {
		if ks[i] == nil {
			return codeInternalError
		}
	}
	ps, out := unsafe.Slice(outs, n), unsafe.Slice(results, n)
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	names := make([]string, n)
	for i := range n {
		names[i] = C.GoString(ks[i])
		ps[i] = nil
	}
	parallel(n, func(i int) {
		p, r := getAlloc(c, names[i])
		ps[i], out[i] = p, C.int64_t(r)
	})
	return codeOK
}

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
	ks := unsafe.Slice(keys, n)
	names := make([]string, n)
	for i := range n {
		if ks[i] == nil {
			return codeInternalError
		}
		names[i] = C.GoString(ks[i])
	}
	out := unsafe.Slice(results, n)
	_, c, release, code := acquire(h)
	if code != codeOK {
		return C.int(code)
	}
	defer release()
	exists, err := c.BatchExist(context.Background(), names)
	for i := range out {
		switch {
		case err != nil:
			out[i] = C.int(codeOf(err))
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
	ks := unsafe.Slice(keys, n)
	names := make([]string, n)
	for i := range n {
		if ks[i] == nil {
			return codeInternalError
		}
		names[i] = C.GoString(ks[i])
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

//export kvtier_go_set_tenant
func kvtier_go_set_tenant(h C.uintptr_t, tenant *C.char) (ret C.int) {
	defer guard(&ret)
	s := lookup(h)
	if s == nil || tenant == nil {
		return codeInternalError
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil || s.closed {
		return codeInvalidParams // the tenant is fixed at setup
	}
	s.tenant = C.GoString(tenant)
	return codeOK
}

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
	ks := unsafe.Slice(keys, n)
	names := make([]string, n)
	for i := range n {
		if ks[i] == nil {
			return codeInternalError
		}
		names[i] = C.GoString(ks[i])
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
