// Package dram owns kvtier's DRAM segments: large memory regions
// mapped once per process, backed by explicit 2 MiB hugepages, transparent
// hugepages or normal pages, locked in memory where the host permits, touched
// once at start and never given back while mapped.
//
// # Contract
//
//   - Map returns one mmap'd anonymous, private, read-write Region. With
//     HugepageAuto it uses explicit hugepages (MAP_HUGETLB|MAP_HUGE_2MB, size
//     rounded up to 2 MiB) when /proc/meminfo reports enough HugePages_Free,
//     else transparent hugepages (madvise MADV_HUGEPAGE, size rounded up to
//     2 MiB so whole huge pages can back it), else normal pages. HugepageOn
//     requires explicit hugepages and fails with an error naming
//     /proc/sys/vm/nr_hugepages when too few are free. HugepageOff uses normal
//     pages (no madvise). Region.Kind reports which was used.
//   - MapShared is Map for memory other processes of the host map too (the
//     transfer engine's shared-memory path): the region is a memfd
//     (memfd_create with MFD_HUGETLB|MFD_HUGE_2MB when explicit hugepages
//     are used) mapped MAP_SHARED, with the same page choices, locking and
//     prefault; Region.File returns the memfd to pass on. Transparent
//     hugepages apply to it only where the host's shmem_enabled allows
//     (else Kind says "normal"). Close unmaps and closes the memfd; other
//     processes' mappings keep the pages until they unmap.
//   - The region is locked with mlock2(MLOCK_ONFAULT) (plain mlock on kernels
//     without it). Where the kernel refuses (RLIMIT_MEMLOCK without
//     CAP_IPC_LOCK) the region still works, Region.Locked is false and
//     Region.Warnings says why. The package never logs; callers print the
//     warnings.
//   - Region.Prefault faults every page in once, keeping the contents:
//     madvise(MADV_POPULATE_WRITE) on 32 MiB chunks from two goroutines, or,
//     on kernels before 5.14, an atomic add of zero to one word per page. It
//     is the only first touch: pages are never returned (no MADV_DONTNEED)
//     while the region is mapped, so later writes run at memory speed.
//   - Region.Close unmaps. Closing twice returns an error, never crashes;
//     Bytes after Close returns nil. Callers must stop using the slice before
//     Close (the transfer engine's UnregisterSegment waits for that).
//   - Split cuts a region (or any byte slice) into segments of at most a given
//     size, for mounting DRAM larger than --segment-size as several segments.
//   - Memory accounts the bytes mapped and locked by the regions created
//     through it. There is no package-level mutable state: two appliances in
//     one test process each own a Memory.
//
// # Caveats
//
// Explicit hugepages are reserved at mmap time (MAP_PRIVATE), so a successful
// Map never SIGBUSes later for lack of hugepages. Transparent hugepages are a
// hint: the kernel may still back parts of a THP region with 4 KiB pages.
//
// # Imports
//
// dram is a mechanism: the appliance and the client SDK (global_segment_size)
// import it; it imports nothing of kvtier (only golang.org/x/sys/unix).
package dram
