// Package namespace owns the storage behind an NVMe namespace exported by
// nof/target: the small Namespace interface (byte-addressed reads and writes,
// flush, size, block size), optional capabilities found by type assertion
// (Deallocator, ZeroWriter), and two implementations: File (a regular file or
// block device opened with O_DIRECT, correct for any offset/length through
// aligned bounce buffers and read-modify-write under stripe locks; aligned
// transfers from Align-aligned buffers go through Linux native AIO, falling
// back to pread/pwrite) and Memory (a caller-provided []byte such as an
// appliance DRAM segment). It invents no byte format. nof/target and the
// appliance import it.
//
// Caveat: a context passed to File or Memory is not consulted once a
// transfer started; kernel I/O cannot be cancelled safely.
package namespace
