// Package crc32c computes CRC32C (Castagnoli), the checksum kvtier stores
// with every object and verifies on every read, faster than hash/crc32 on
// CPUs with AVX-512 VPCLMULQDQ.
//
// hash/crc32 runs Castagnoli with the SSE 4.2 CRC32 instruction, three
// streams at a time: about 20 GB/s here, as fast as copy(), so a verified
// 1 MiB read spends as long checksumming as moving the bytes. This package
// folds 256 bytes per step with carry-less multiplies over four 512-bit
// accumulators (the method of Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ", with 2048- and 512-bit fold constants for
// the Castagnoli polynomial), then hands the 64-byte remainder and the tail
// to hash/crc32. Without the instructions, or for short inputs, it is
// hash/crc32.
//
// Update and Checksum have exactly hash/crc32's semantics with the
// Castagnoli table; Combine joins the checksums of consecutive parts (so
// parts checksummed in parallel or as they arrive give the whole one). The package has no state but read-only tables; it
// imports nothing of kvtier.
package crc32c

import "hash/crc32"

// table is hash/crc32's Castagnoli table (read-only after init).
var table = crc32.MakeTable(crc32.Castagnoli)

// minFold is the shortest input worth the vector path: below it the setup
// and the 64-byte remainder cost more than they save.
const minFold = 1024

// Update returns the CRC32C of p appended to data whose CRC32C is crc.
func Update(crc uint32, p []byte) uint32 {
	if len(p) >= minFold && haveFold {
		n := len(p) &^ (foldBlock - 1)
		crc = fold(crc, p[:n])
		p = p[n:]
	}
	return crc32.Update(crc, table, p)
}

// Checksum returns the CRC32C of p.
func Checksum(p []byte) uint32 { return Update(0, p) }

// CopyUpdate copies src into dst (which must be at least as long) and
// returns Update(crc, src), reading src once: the vector path stores each
// 256-byte block as it folds it, so a verified copy costs about a copy.
func CopyUpdate(crc uint32, dst, src []byte) uint32 {
	dst = dst[:len(src)] // bounds check up front
	if len(src) >= minFold && haveFold {
		n := len(src) &^ (foldBlock - 1)
		var state [64]byte
		foldCopyAVX512(^crc, dst[:n], src[:n], &state)
		crc = crc32.Update(0xFFFFFFFF, table, state[:])
		dst, src = dst[n:], src[n:]
	}
	// The rest (or everything, without the vector path): copy a cache-sized
	// chunk, then checksum it while it is still in cache.
	for len(src) > 0 {
		c := min(len(src), copyChunk)
		copy(dst[:c], src[:c])
		crc = crc32.Update(crc, table, dst[:c])
		dst, src = dst[c:], src[c:]
	}
	return crc
}

// copyChunk is how much CopyUpdate's scalar path copies before checksumming.
const copyChunk = 64 << 10

// foldBlock is what one vector step consumes.
const foldBlock = 256

// fold returns Update(crc, p) for len(p) a positive multiple of foldBlock
// (haveFold must be true). The vector code folds p into a 64-byte state
// congruent to it modulo the polynomial (with ^crc folded into its first
// bytes, as the CRC's initial register); the CRC of that state with an
// all-ones register is the CRC of p.
func fold(crc uint32, p []byte) uint32 {
	var state [64]byte
	foldAVX512(^crc, p, &state)
	return crc32.Update(0xFFFFFFFF, table, state[:])
}
