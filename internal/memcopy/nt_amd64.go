package memcopy

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveNT: the vector path needs AVX2 (VMOVNTDQ on 32-byte registers).
var haveNT = cpu.X86.HasAVX2

// ntBlock is what one iteration of the vector loop moves.
const ntBlock = 128

// NonTemporal copies src into dst with non-temporal stores; see the package doc.
func NonTemporal(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < minNT || !haveNT {
		return copy(dst, src[:n])
	}
	dst, src = dst[:n], src[:n]
	// Head: ordinary stores up to the first 32-byte aligned byte of dst.
	head := int((32 - uintptrOf(dst)%32) % 32)
	copy(dst[:head], src[:head])
	body := (n - head) &^ (ntBlock - 1)
	if body > 0 { // always, given minNT; copyNT needs at least one block
		raceAccess(dst[head:head+body], src[head:head+body])
		copyNT(dst[head:head+body], src[head:head+body])
	}
	copy(dst[head+body:], src[head+body:])
	return n
}

// copyNT copies len(src) bytes (a positive multiple of ntBlock) into dst
// (32-byte aligned) with VMOVNTDQ, then SFENCE. Implemented in nt_amd64.s.
//
//go:noescape
func copyNT(dst, src []byte)

// uintptrOf returns the address of b's first byte (b non-empty).
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
