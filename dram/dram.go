package dram

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HugePageSize is the explicit hugepage size kvtier uses (2 MiB).
const HugePageSize = 2 << 20

// NrHugepagesPath is where an operator reserves explicit hugepages.
const NrHugepagesPath = "/proc/sys/vm/nr_hugepages"

const meminfoPath = "/proc/meminfo"

// Region kinds reported by Region.Kind.
const (
	KindHugeTLB = "hugetlb"
	KindTHP     = "thp"
	KindNormal  = "normal"
)

// HugepageMode selects the page backing of a Region (--hugepages auto|on|off).
type HugepageMode int

// The modes. The zero value is Auto.
const (
	HugepageAuto HugepageMode = iota // explicit hugepages if reserved, else THP, else normal
	HugepageOn                       // explicit hugepages or fail
	HugepageOff                      // normal pages only
)

func (m HugepageMode) String() string {
	switch m {
	case HugepageAuto:
		return "auto"
	case HugepageOn:
		return "on"
	case HugepageOff:
		return "off"
	}
	return fmt.Sprintf("HugepageMode(%d)", int(m))
}

// ParseHugepageMode parses "auto", "on" or "off".
func ParseHugepageMode(s string) (HugepageMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return HugepageAuto, nil
	case "on":
		return HugepageOn, nil
	case "off":
		return HugepageOff, nil
	}
	return 0, fmt.Errorf("dram: invalid hugepages mode %q (want auto|on|off)", s)
}

// Stats are the bytes a Memory has mapped and locked right now.
type Stats struct {
	Regions     int
	MappedBytes uint64
	LockedBytes uint64
	HugeTLB     uint64 // bytes mapped with explicit hugepages
	THP         uint64 // bytes mapped with transparent hugepage advice
	Normal      uint64 // bytes mapped with normal pages
}

// Memory maps regions and accounts for them. The zero value is ready to use.
// A process (or a test) passes one Memory to whatever maps segments.
type Memory struct {
	// meminfo, when set, replaces /proc/meminfo (tests of the decision logic).
	meminfo string

	mu sync.Mutex
	// guarded by mu:
	stats Stats
}

// Stats returns the current accounting.
func (m *Memory) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

func (m *Memory) account(r *Region, sign int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	add := func(v *uint64, n uint64) {
		if sign > 0 {
			*v += n
		} else {
			*v -= n
		}
	}
	m.stats.Regions += sign
	add(&m.stats.MappedBytes, r.mapped)
	if r.locked {
		add(&m.stats.LockedBytes, r.mapped)
	}
	switch r.kind {
	case KindHugeTLB:
		add(&m.stats.HugeTLB, r.mapped)
	case KindTHP:
		add(&m.stats.THP, r.mapped)
	default:
		add(&m.stats.Normal, r.mapped)
	}
}

// Region is one mmap'd memory region: anonymous and private (Map) or a
// shared memfd (MapShared).
type Region struct {
	mem      *Memory // may be nil (package-level Map)
	size     uint64  // requested size: len(Bytes())
	mapped   uint64  // mapped length (rounded up)
	kind     string
	locked   bool
	pageSize int
	warnings []string
	file     *os.File // the memfd of a shared region; nil for anonymous ones

	mu sync.Mutex
	// guarded by mu:
	data   []byte // full mapping; nil after Close
	closed bool
}

// Map maps a region without accounting it in a Memory.
func Map(size uint64, mode HugepageMode) (*Region, error) {
	return (*Memory)(nil).Map(size, mode)
}

// Map maps one anonymous region of size bytes with the given page backing and
// accounts it in m (m may be nil).
func (m *Memory) Map(size uint64, mode HugepageMode) (*Region, error) {
	return m.mapRegion(size, mode, false)
}

// MapShared is Map for memory other processes of the host may map too: the
// region is a memfd (hugetlb-backed when explicit hugepages are used)
// mapped MAP_SHARED, and Region.File returns it for passing to them.
func (m *Memory) MapShared(size uint64, mode HugepageMode) (*Region, error) {
	return m.mapRegion(size, mode, true)
}

// MapShared maps a shared region without accounting it in a Memory.
func MapShared(size uint64, mode HugepageMode) (*Region, error) {
	return (*Memory)(nil).MapShared(size, mode)
}

func (m *Memory) mapRegion(size uint64, mode HugepageMode, shared bool) (*Region, error) {
	if size == 0 {
		return nil, errors.New("dram: region size must be > 0")
	}
	if mode != HugepageAuto && mode != HugepageOn && mode != HugepageOff {
		return nil, fmt.Errorf("dram: invalid hugepages mode %d", int(mode))
	}
	if size > 1<<46 {
		return nil, fmt.Errorf("dram: region size %d is absurd", size)
	}
	hugeLen := roundUp(size, HugePageSize)
	r := &Region{mem: m, size: size}
	mmap := mmapAnon
	if shared {
		mmap = r.mmapMemfd
	}

	if mode != HugepageOff {
		free, err := m.hugepagesFree()
		need := hugeLen / HugePageSize
		switch {
		case err == nil && free >= need:
			data, merr := mmap(hugeLen, unix.MAP_HUGETLB|unix.MAP_HUGE_2MB)
			if merr == nil {
				r.data, r.mapped, r.kind, r.pageSize = data, hugeLen, KindHugeTLB, HugePageSize
				break
			}
			if mode == HugepageOn {
				return nil, fmt.Errorf("dram: mmap of %d bytes with 2 MiB hugepages failed: %w (HugePages_Free=%d; reserve more in %s)", hugeLen, merr, free, NrHugepagesPath)
			}
			r.warnings = append(r.warnings, fmt.Sprintf("explicit hugepages reserved but mmap(MAP_HUGETLB) failed: %v; using transparent hugepages", merr))
		case mode == HugepageOn:
			if err != nil {
				return nil, fmt.Errorf("dram: --hugepages on: cannot read HugePages_Free: %w (reserve hugepages in %s)", err, NrHugepagesPath)
			}
			return nil, fmt.Errorf("dram: --hugepages on: %d bytes need %d free 2 MiB hugepages, HugePages_Free=%d; reserve them with: echo %d > %s", size, need, free, need, NrHugepagesPath)
		}
	}
	if r.data == nil && mode == HugepageAuto {
		data, err := mmap(hugeLen, 0)
		if err != nil {
			return nil, fmt.Errorf("dram: mmap of %d bytes failed: %w", hugeLen, err)
		}
		if err := unix.Madvise(data, unix.MADV_HUGEPAGE); err == nil && (!shared || shmemTHP()) {
			r.data, r.mapped, r.kind, r.pageSize = data, hugeLen, KindTHP, os.Getpagesize()
		} else if err == nil {
			// Shared memory honours the advice only where the host's
			// shmem_enabled allows it; it is still correct without.
			r.data, r.mapped, r.kind, r.pageSize = data, hugeLen, KindNormal, os.Getpagesize()
		} else {
			r.data, r.mapped, r.kind, r.pageSize = data, hugeLen, KindNormal, os.Getpagesize()
			r.warnings = append(r.warnings, fmt.Sprintf("madvise(MADV_HUGEPAGE) refused: %v; using normal pages", err))
		}
	}
	if r.data == nil {
		n := roundUp(size, uint64(os.Getpagesize()))
		data, err := mmap(n, 0)
		if err != nil {
			return nil, fmt.Errorf("dram: mmap of %d bytes failed: %w", n, err)
		}
		r.data, r.mapped, r.kind, r.pageSize = data, n, KindNormal, os.Getpagesize()
	}

	if err := mlockOnFault(r.data); err == nil {
		r.locked = true
	} else {
		var lim unix.Rlimit
		limStr := "unknown"
		if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
			limStr = strconv.FormatUint(lim.Cur, 10)
		}
		r.warnings = append(r.warnings, fmt.Sprintf("mlock of %d bytes not permitted (%v; RLIMIT_MEMLOCK=%s bytes, no CAP_IPC_LOCK): segment memory may be swapped out; raise the limit (ulimit -l / LimitMEMLOCK=infinity)", r.mapped, err, limStr))
	}
	if m != nil {
		m.account(r, +1)
	}
	return r, nil
}

func mmapAnon(n uint64, extra int) ([]byte, error) {
	return unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|extra)
}

// mmapMemfd creates a memfd of n bytes (on hugetlbfs when extra asks for
// MAP_HUGETLB) and maps it shared; on success r keeps the file.
func (r *Region) mmapMemfd(n uint64, extra int) ([]byte, error) {
	flags := unix.MFD_CLOEXEC
	if extra&unix.MAP_HUGETLB != 0 {
		flags |= unix.MFD_HUGETLB | unix.MFD_HUGE_2MB
	}
	fd, err := unix.MemfdCreate("kvtier-dram", flags)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "kvtier-dram")
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		f.Close()
		return nil, fmt.Errorf("ftruncate memfd to %d bytes: %w", n, err)
	}
	// MAP_NORESERVE is not given: a hugetlb mapping reserves its pages
	// here, so a successful map never SIGBUSes later for lack of them.
	data, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.file = f
	return data, nil
}

// shmemTHPPath says whether shared memory may use transparent hugepages.
const shmemTHPPath = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

// shmemTHP reports whether madvise(MADV_HUGEPAGE) has an effect on shared
// memory here (shmem_enabled is advise, always, within_size or force).
func shmemTHP() bool {
	b, err := os.ReadFile(shmemTHPPath)
	if err != nil {
		return false
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return false
	}
	switch s[i+1 : j] {
	case "advise", "always", "within_size", "force":
		return true
	}
	return false
}

// mlockOnFault locks b as its pages are faulted in (mlock2 MLOCK_ONFAULT), so
// that Map stays fast and Prefault does the one first touch. Kernels without
// mlock2 get a plain mlock, which populates the pages itself.
func mlockOnFault(b []byte) error {
	_, _, e := unix.Syscall(unix.SYS_MLOCK2, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MLOCK_ONFAULT)
	if e == 0 {
		return nil
	}
	if e == unix.ENOSYS || e == unix.EINVAL {
		return unix.Mlock(b)
	}
	return e
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

// hugepagesFree reads HugePages_Free from /proc/meminfo (or the test override).
func (m *Memory) hugepagesFree() (uint64, error) {
	if m != nil && m.meminfo != "" {
		return parseHugepagesFree(strings.NewReader(m.meminfo))
	}
	f, err := os.Open(meminfoPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseHugepagesFree(f)
}

func parseHugepagesFree(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "HugePages_Free:" {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no HugePages_Free line in " + meminfoPath)
}

// Bytes returns the region's memory (Size bytes). It is nil after Close.
func (r *Region) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.data == nil {
		return nil
	}
	return r.data[:r.size:r.size]
}

// Size is the usable size in bytes (as requested from Map).
func (r *Region) Size() uint64 { return r.size }

// MappedSize is the mapped length (Size rounded up to the page size).
func (r *Region) MappedSize() uint64 { return r.mapped }

// Kind reports the page backing: "hugetlb", "thp" or "normal".
func (r *Region) Kind() string { return r.kind }

// PageSize is the stride Prefault touches.
func (r *Region) PageSize() int { return r.pageSize }

// File is the memfd backing a region from MapShared (nil for Map). It is
// valid until Close; other processes map it MAP_SHARED to reach the same
// memory (offset 0 is the first byte of Bytes).
func (r *Region) File() *os.File { return r.file }

// Locked reports whether the region is mlock'ed.
func (r *Region) Locked() bool { return r.locked }

// Warnings returns human-readable warnings from Map (mlock refused, hugepage
// fallbacks). The caller decides whether to log them.
func (r *Region) Warnings() []string { return append([]string(nil), r.warnings...) }

// Prefault touches every page of the region once, keeping its contents. It is
// meant to run once, right after Map, before the region is served. It asks
// the kernel to populate chunks (madvise MADV_POPULATE_WRITE, Linux 5.14+;
// on this kind of VM several times faster than touching, and far faster for
// transparent hugepages) from two goroutines, and falls back to touching one
// word per page where the kernel lacks it.
func (r *Region) Prefault(ctx context.Context) error {
	r.mu.Lock()
	data := r.data
	r.mu.Unlock()
	if data == nil {
		return errors.New("dram: prefault of a closed region")
	}
	// The whole mapping, including the rounded-up tail, so no fault is ever
	// taken later. Chunks are whole pages (HugePageSize is a multiple of
	// every page size).
	const chunk = 16 * HugePageSize
	const workers = 2
	nchunks := (len(data) + chunk - 1) / chunk
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			populate := true
			for {
				i := int(next.Add(1) - 1)
				if i >= nchunks {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[w] = fmt.Errorf("dram: prefault interrupted: %w", err)
					return
				}
				c := data[i*chunk : min((i+1)*chunk, len(data))]
				if populate {
					err := unix.Madvise(c, unix.MADV_POPULATE_WRITE)
					if err == nil {
						continue
					}
					if err != unix.EINVAL && err != unix.ENOSYS {
						errs[w] = fmt.Errorf("dram: prefault: madvise(MADV_POPULATE_WRITE): %w", err)
						return
					}
					populate = false // old kernel: touch instead
				}
				touch(c, r.pageSize)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// touch writes to one word of every page of c without changing it.
func touch(c []byte, pageSize int) {
	for off := 0; off < len(c); off += pageSize {
		atomic.AddUint32((*uint32)(unsafe.Pointer(&c[off])), 0)
	}
}

// Close unmaps the region. A second Close returns an error.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("dram: region already closed")
	}
	if err := unix.Munmap(r.data); err != nil {
		return fmt.Errorf("dram: munmap: %w", err)
	}
	r.closed = true
	r.data = nil
	if r.file != nil {
		// Other processes' mappings keep the pages until they unmap them.
		_ = r.file.Close()
	}
	if r.mem != nil {
		r.mem.account(r, -1)
	}
	return nil
}

// Split cuts mem into consecutive segments of segmentSize bytes; the last one
// holds the remainder. segmentSize 0 (or >= len(mem)) yields one segment. The
// segments alias mem and have their capacity clipped so that appending to one
// cannot overwrite the next.
func Split(mem []byte, segmentSize uint64) [][]byte {
	n := uint64(len(mem))
	if n == 0 {
		return nil
	}
	if segmentSize == 0 || segmentSize >= n {
		return [][]byte{mem[:n:n]}
	}
	out := make([][]byte, 0, (n+segmentSize-1)/segmentSize)
	for off := uint64(0); off < n; off += segmentSize {
		end := min(off+segmentSize, n)
		out = append(out, mem[off:end:end])
	}
	return out
}
