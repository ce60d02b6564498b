//go:build !linux

package pdu

import (
	"net"
	"syscall"
)

// tryWritev is Linux-only: elsewhere Push leaves the whole write to its
// goroutine.
func tryWritev(_ syscall.RawConn, bufs net.Buffers) (net.Buffers, error) { return bufs, nil }
