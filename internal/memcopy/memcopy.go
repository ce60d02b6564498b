// Package memcopy owns one copy primitive: NonTemporal, a copy whose stores
// bypass the CPU caches, for bytes written into memory this CPU will not
// read again soon (a put's bytes landing in an appliance's DRAM segment).
//
// Why: a cached store to memory that is not in the cache first reads the
// line (read-for-ownership), so copying into cold segment memory moves
// each byte twice over the memory bus and evicts the cache's useful
// contents; non-temporal stores write whole lines straight to memory.
// Measured on the 2-vCPU VM (BenchmarkNonTemporal: 1 MiB into successive
// offsets of a 1 GiB shared mapping, the two taking turns; 22:50 UTC):
// copy 194 µs, NonTemporal 95 µs per MiB (2.05 x). Through a whole put
// (kvtier bench, standalone, shared memory, 1 MiB): one caller 4.7-5.3
// GB/s against 2.9-3.1 with copy, four 5.5-6.3 against 4.2-4.9, fifty
// 7.4-8.1 against 5.3-6.4; the caller's next master call is faster too,
// since the copy no longer evicts what the caller's CPU had cached.
//
// Contract: NonTemporal(dst, src) copies min(len(dst), len(src)) bytes and
// returns that count, like copy, for any lengths and alignments (it stores
// the unaligned head and the tail with ordinary stores). Unlike copy, dst
// and src must not overlap.
// The stores are fenced (SFENCE) before it returns, so they are ordered
// before any later store of the caller, as ordinary stores are. Copies
// under 64 KiB, and every copy without AVX2 or on other architectures, are
// copy. Under the race detector the vector path reports its reads and
// writes (runtime.RaceReadRange/RaceWriteRange), as copy's are.
package memcopy

// minNT is the smallest copy worth non-temporal stores: below it the bytes
// are as likely to be read again soon, and the fence costs more than it
// saves.
const minNT = 64 << 10
