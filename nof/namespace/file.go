package namespace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"github.com/ncw/directio"
	"golang.org/x/sys/unix"
)

// Align is the memory and file alignment direct I/O needs.
const Align = 4096

// AlignedBuffer returns an n-byte slice whose first byte is Align-aligned
// (so File can do direct I/O into it without a bounce buffer).
func AlignedBuffer(n int) []byte {
	if n == 0 {
		return nil
	}
	return directio.AlignedBlock(n)
}

func aligned(p []byte) bool {
	return len(p) == 0 || uintptr(unsafe.Pointer(&p[0]))&(Align-1) == 0
}

// FileConfig configures OpenFile. The zero value means a 4096-byte block,
// direct I/O, and an existing file whose size is used as is.
type FileConfig struct {
	// Size creates or extends the file to this many bytes (0 = keep).
	Size int64
	// BlockSize is the LBA size exposed to hosts (512 or 4096; default 4096).
	BlockSize int
	// Buffered disables O_DIRECT (for file systems that refuse it, e.g. tmpfs).
	Buffered bool
}

// Validate checks the configuration.
func (c *FileConfig) Validate() error {
	if c.Size < 0 {
		return fmt.Errorf("namespace: negative size %d", c.Size)
	}
	if c.BlockSize != 0 {
		if err := validBlock(c.BlockSize); err != nil {
			return err
		}
	}
	return nil
}

const stripes = 64

// File is a namespace over a file or block device.
type File struct {
	f      *os.File
	fd     int
	aio    *aioRing // nil: blocking pread/pwrite
	size   int64
	block  int
	direct bool
	// locks protect read-modify-write of partial Align-sized blocks: an RMW
	// holds its head/tail blocks' stripes exclusively, every other write
	// holds the stripes of the blocks it covers shared, so an RMW never
	// writes back a stale copy of bytes another write just stored, while
	// aligned writes never wait for each other.
	locks [stripes]sync.RWMutex
}

var (
	_ Namespace   = (*File)(nil)
	_ Deallocator = (*File)(nil)
	_ ZeroWriter  = (*File)(nil)
	_ Starter     = (*File)(nil)
	_ Batcher     = (*File)(nil)
	_ Batch       = (*fileBatch)(nil)
)

// OpenFile opens (creating if cfg.Size > 0) path as a namespace.
func OpenFile(path string, cfg FileConfig) (*File, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 4096
	}
	flag := os.O_RDWR
	if cfg.Size > 0 {
		flag |= os.O_CREATE
	}
	var f *os.File
	var err error
	if cfg.Buffered {
		f, err = os.OpenFile(path, flag, 0o644)
	} else {
		f, err = directio.OpenFile(path, flag, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("namespace: open %s: %w", path, err)
	}
	size, err := deviceSize(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if cfg.Size > size {
		if err := f.Truncate(cfg.Size); err != nil {
			f.Close()
			return nil, fmt.Errorf("namespace: size %s: %w", path, err)
		}
		size = cfg.Size
	}
	size -= size % int64(cfg.BlockSize)
	if size <= 0 {
		f.Close()
		return nil, fmt.Errorf("namespace: %s is smaller than one block", path)
	}
	nf := &File{f: f, fd: int(f.Fd()), size: size, block: cfg.BlockSize, direct: !cfg.Buffered}
	if nf.direct {
		nf.aio, _ = newAIO(256) // without AIO, blocking pread/pwrite still work
	}
	return nf, nil
}

func deviceSize(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Mode()&os.ModeDevice != 0 {
		n, err := f.Seek(0, 2)
		if err != nil {
			return 0, fmt.Errorf("namespace: size of device %s: %w", f.Name(), err)
		}
		return n, nil
	}
	return st.Size(), nil
}

// Close closes the file; no I/O may be in progress.
func (f *File) Close() error {
	if f.aio != nil {
		f.aio.close()
	}
	return f.f.Close()
}

func (f *File) Size() int64    { return f.size }
func (f *File) BlockSize() int { return f.block }

func (f *File) fast(p []byte, off int64) bool {
	return !f.direct || (off%Align == 0 && len(p)%Align == 0 && aligned(p))
}

func (f *File) ReadAt(_ context.Context, p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), f.size); err != nil {
		return err
	}
	if f.fast(p, off) {
		if f.aio != nil && len(p) > 0 {
			if err := f.aio.do(iocbCmdPread, f.fd, p, off); !errors.Is(err, errAIOUnavailable) {
				return f.ioErr("read", off, err)
			}
		}
		return f.pread(p, off)
	}
	start := off &^ (Align - 1)
	end := (off + int64(len(p)) + Align - 1) &^ (Align - 1)
	bounce := AlignedBuffer(int(end - start))
	if err := f.pread(bounce, start); err != nil {
		return err
	}
	copy(p, bounce[off-start:])
	return nil
}

// StartRead begins ReadAt(p, off). Aligned direct transfers are submitted
// to the kernel at once; anything else runs in wait.
func (f *File) StartRead(p []byte, off int64) (func() error, error) {
	var b fileBatch
	b.f = f
	wait, err := b.StartRead(p, off)
	b.Submit()
	return wait, err
}

// StartWrite begins WriteAt(p, off). Aligned direct transfers whose stripes
// are free are submitted to the kernel at once (holding the stripes shared
// until wait); anything else, including a write that would have to wait
// for a read-modify-write, runs in wait.
func (f *File) StartWrite(p []byte, off int64) (func() error, error) {
	var b fileBatch
	b.f = f
	wait, err := b.StartWrite(p, off)
	b.Submit()
	return wait, err
}

// NewBatch returns a Batch over f.
func (f *File) NewBatch() Batch { return &fileBatch{f: f} }

// fileBatch queues aligned direct transfers for one io_submit.
type fileBatch struct {
	f *File
	q aioBatch
}

func (b *fileBatch) StartRead(p []byte, off int64) (func() error, error) {
	f := b.f
	if err := checkRange(off, int64(len(p)), f.size); err != nil {
		return nil, err
	}
	if f.direct && f.aio != nil && len(p) > 0 && f.fast(p, off) {
		if r, err := f.aio.queue(&b.q, iocbCmdPread, f.fd, p, off); err == nil {
			return func() error {
				err := f.aio.wait(r)
				if errors.Is(err, errAIOUnavailable) {
					return f.pread(p, off)
				}
				return f.ioErr("read", off, err)
			}, nil
		}
	}
	return func() error { return f.ReadAt(context.Background(), p, off) }, nil
}

func (b *fileBatch) StartWrite(p []byte, off int64) (func() error, error) {
	f := b.f
	if err := checkRange(off, int64(len(p)), f.size); err != nil {
		return nil, err
	}
	if f.direct && f.aio != nil && len(p) > 0 && f.fast(p, off) {
		if unlock, ok := f.tryRLockStripes(stripeMask(off, off+int64(len(p)))); ok {
			if r, err := f.aio.queue(&b.q, iocbCmdPwrite, f.fd, p, off); err == nil {
				return func() error {
					defer unlock()
					err := f.aio.wait(r)
					if errors.Is(err, errAIOUnavailable) {
						return f.pwrite(p, off) // the stripes are already held
					}
					return f.ioErr("write", off, err)
				}, nil
			}
			unlock()
		}
	}
	return func() error { return f.WriteAt(context.Background(), p, off) }, nil
}

func (b *fileBatch) Submit() {
	if len(b.q.reqs) > 0 {
		b.f.aio.submit(&b.q)
	}
}

// tryRLockStripes takes the stripes in mask shared without waiting; ok is
// false (and nothing is held) if one of them is held exclusively.
func (f *File) tryRLockStripes(mask uint64) (unlock func(), ok bool) {
	for i := 0; i < stripes; i++ {
		if mask&(1<<i) == 0 {
			continue
		}
		if !f.locks[i].TryRLock() {
			for j := 0; j < i; j++ {
				if mask&(1<<j) != 0 {
					f.locks[j].RUnlock()
				}
			}
			return nil, false
		}
	}
	return func() {
		for i := 0; i < stripes; i++ {
			if mask&(1<<i) != 0 {
				f.locks[i].RUnlock()
			}
		}
	}, true
}

// pread reads fully; a short read past EOF of a sparse extension reads as
// zeroes (cannot happen inside size, but guard anyway).
func (f *File) pread(p []byte, off int64) error {
	n, err := f.f.ReadAt(p, off)
	if err != nil && n < len(p) {
		if n >= 0 && errors.Is(err, io.EOF) {
			clear(p[n:])
			return nil
		}
		return fmt.Errorf("namespace: read %s at %d: %w", f.f.Name(), off, err)
	}
	return nil
}

// stripeMask returns the stripes of the Align-sized blocks in [start, end).
func stripeMask(start, end int64) uint64 {
	var mask uint64
	for b := start / Align; b < (end+Align-1)/Align && mask != ^uint64(0); b++ {
		mask |= 1 << (uint64(b) % stripes)
	}
	return mask
}

// lockStripes takes the stripes in excl exclusively and the others in
// shared (minus excl) shared, in ascending order, and returns the unlock.
func (f *File) lockStripes(shared, excl uint64) func() {
	shared &^= excl
	for i := 0; i < stripes; i++ {
		switch {
		case excl&(1<<i) != 0:
			f.locks[i].Lock()
		case shared&(1<<i) != 0:
			f.locks[i].RLock()
		}
	}
	return func() {
		for i := 0; i < stripes; i++ {
			switch {
			case excl&(1<<i) != 0:
				f.locks[i].Unlock()
			case shared&(1<<i) != 0:
				f.locks[i].RUnlock()
			}
		}
	}
}

func (f *File) WriteAt(_ context.Context, p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), f.size); err != nil {
		return err
	}
	end := off + int64(len(p))
	if f.fast(p, off) {
		defer f.lockStripes(stripeMask(off, end), 0)()
		if f.aio != nil && len(p) > 0 {
			if err := f.aio.do(iocbCmdPwrite, f.fd, p, off); !errors.Is(err, errAIOUnavailable) {
				return f.ioErr("write", off, err)
			}
		}
		return f.pwrite(p, off)
	}
	// Read-modify-write of the partial head/tail blocks through an aligned
	// bounce buffer, under the range lock.
	start := off &^ (Align - 1)
	aend := (end + Align - 1) &^ (Align - 1)
	var excl uint64
	if off != start {
		excl |= stripeMask(start, start+Align)
	}
	if end != aend {
		excl |= stripeMask(aend-Align, aend)
	}
	defer f.lockStripes(stripeMask(start, aend), excl)()
	bounce := AlignedBuffer(int(aend - start))
	if off != start {
		if err := f.pread(bounce[:Align], start); err != nil {
			return err
		}
	}
	if end != aend && !(off != start && aend-Align == start) { // tail block, unless the head read covered it
		if err := f.pread(bounce[len(bounce)-Align:], aend-Align); err != nil {
			return err
		}
	}
	copy(bounce[off-start:], p)
	return f.pwrite(bounce, start)
}

func (f *File) ioErr(op string, off int64, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("namespace: %s %s at %d: %w", op, f.f.Name(), off, err)
}

func (f *File) pwrite(p []byte, off int64) error {
	if _, err := f.f.WriteAt(p, off); err != nil {
		return fmt.Errorf("namespace: write %s at %d: %w", f.f.Name(), off, err)
	}
	return nil
}

func (f *File) Flush(context.Context) error {
	if err := unix.Fdatasync(int(f.f.Fd())); err != nil {
		return fmt.Errorf("namespace: flush %s: %w", f.f.Name(), err)
	}
	return nil
}

func (f *File) Deallocate(ctx context.Context, off, n int64) error {
	return f.WriteZeroes(ctx, off, n)
}

// WriteZeroes punches a hole (reads back as zeroes), falling back to
// writing zeroes where the file system or device cannot.
func (f *File) WriteZeroes(ctx context.Context, off, n int64) error {
	if err := checkRange(off, n, f.size); err != nil {
		return err
	}
	unlock := f.lockStripes(0, stripeMask(off, off+n))
	err := unix.Fallocate(int(f.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	unlock()
	if err == nil {
		return nil
	}
	const chunk = 1 << 20
	zero := AlignedBuffer(chunk)
	for n > 0 {
		k := min(n, chunk)
		if err := f.WriteAt(ctx, zero[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}
