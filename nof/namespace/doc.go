// Package namespace owns the storage behind an NVMe namespace exported by
// nof/target: the small Namespace interface (byte-addressed reads and writes,
// flush, size, block size), optional capabilities found by type assertion
// (Deallocator, ZeroWriter, Starter: start a transfer now and wait for it
// elsewhere, Batcher: gather started transfers and hand them to the device
// in one call), and two implementations: File (a regular file or block
// device opened with O_DIRECT, correct for any offset/length through aligned
// bounce buffers and read-modify-write under stripe locks; aligned transfers
// from Align-aligned buffers go through Linux native AIO, falling back to
// pread/pwrite; it is a Starter and a Batcher) and Memory (a caller-provided
// []byte such as an appliance DRAM segment). It invents no byte format.
// nof/target and the appliance import it.
//
// AIO completions are signalled on one eventfd per in-flight request that
// its waiter reads through the Go netpoller, then collected with a
// non-blocking io_getevents; no goroutine sits in a blocking system call
// and no reaper goroutine stands between the kernel and the waiter.
//
// Caveat: a context passed to File or Memory is not consulted once a
// transfer started; kernel I/O cannot be cancelled safely.
package namespace
