//go:build !linux

package pdu

import (
	"net"
	"syscall"
)

type iovScratch = struct{}

// tryWritev is Linux-only: elsewhere Push leaves the whole write to its
// goroutine.
func tryWritev(_ syscall.RawConn, bufs net.Buffers, _ *iovScratch) (net.Buffers, error) {
	return bufs, nil
}
