//go:build cgo

// Command capi is kvtier's C ABI: built with -buildmode=c-shared into
// bin/libkvtier.so (`make build`), it exposes Mooncake Store's C API
// (mooncake_store_*, declared in the hand-written kvtier_store.h) over the
// client SDK, so C programs and the Python package python/kvtier (ctypes)
// reach a kvtier cluster as they would a Mooncake one.
//
// What it owns: the handle table (handles are opaque numbers; no Go pointer
// ever reaches C), the per-handle registry of buffers the zero-copy calls may
// use, and the one table from kverr codes to Mooncake's ErrorCode numbers
// (codes.go). store.c defines the public C functions against the header and
// forwards each to a Go export here, so the compiler checks the ABI.
//
// Bytes move without a copy: put_from/get_into hand the transfer engine a
// slice over the caller's registered C memory for the length of the call.
// A call into a registered buffer takes a reference on it, and
// unregister_buffer waits for those to end. Every export recovers from a Go
// panic and returns INTERNAL_ERROR instead of taking the host process down.
//
// # Caveats
//
// A buffer registered and then freed by the caller without unregistering is
// the caller's bug: a later transfer into it faults like any stray pointer.
// The handle table is process-wide state, which a C ABI needs: a handle must
// mean the same store on every thread.
//
// Importers: none (a main package); it imports client and kverr only.
package main

func main() {}
