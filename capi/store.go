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
	"strings"
	"sync"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/auth"
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
	return C.int(setup(h, cstr(localHostname), uint64(globalSegmentSize), uint64(localBufferSize), cstr(protocol), cstr(deviceName), cstr(masterAddr)))
}

//export kvtier_go_init_all
func kvtier_go_init_all(h C.uintptr_t, protocol, deviceName *C.char, mountSegmentSize C.uint64_t) (ret C.int) {
	defer guard(&ret)
	master := os.Getenv("KVTIER_MASTER")
	if master == "" {
		master = "127.0.0.1:50051" // Mooncake's default master address
	}
	return C.int(setup(h, "localhost", uint64(mountSegmentSize), 0, cstr(protocol), cstr(deviceName), master))
}

// setup connects handle h. metadata_server has no meaning for kvtier (its
// master is the only metadata service). protocol "tcp" keeps every transfer
// off RDMA; "rdma" uses device_name (the first of a comma-separated list,
// empty: the first device) when this library was built with RDMA and the
// host has the device, else says why on stderr and moves bytes over TCP
// (shared memory on the appliance's own host either way).
func setup(h C.uintptr_t, localHostname string, globalSegment, localBuffer uint64, protocol, deviceName, masterAddr string) int {
	s := lookup(h)
	if s == nil {
		return codeInternalError
	}
	rdmaDevice := "off"
	switch protocol {
	case "", "tcp":
	case "rdma":
		rdmaDevice, _, _ = strings.Cut(deviceName, ",")
		if rdmaDevice = strings.TrimSpace(rdmaDevice); rdmaDevice == "" {
			rdmaDevice = "auto"
		}
	default:
		fmt.Fprintf(os.Stderr, "kvtier: setup: protocol %q is not available in this library; use \"tcp\" or \"rdma\"\n", protocol)
		return codeInvalidParams
	}
	if masterAddr == "" {
		masterAddr = "127.0.0.1:50051"
	}
	host := localHostname
	if host == "" {
		host = "localhost"
	}
	cfg := client.Config{MasterAddr: masterAddr, GlobalSegmentSize: globalSegment, LocalBufferSize: localBuffer,
		Transfer: client.TransferConfig{RDMADevice: rdmaDevice}}
	// A master with --credentials (README "Security"): the token and CA
	// come from the environment, as for the CLI.
	cfg.Token, _ = auth.ClientToken("")
	tc, err := auth.ClientTLS("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvtier: setup: KVTIER_TLS_CA:", err)
		return codeInvalidParams
	}
	cfg.TLS = tc
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
	if on, why := c.Engine().RDMAStatus(); protocol == "rdma" && !on {
		fmt.Fprintf(os.Stderr, "kvtier: setup: protocol rdma: RDMA %s; transfers go over TCP\n", why)
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
