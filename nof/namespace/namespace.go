package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Namespace is the storage behind one NVMe namespace. Offsets and lengths
// are in bytes; the target only issues whole blocks, but implementations
// accept any range inside Size. Safe for concurrent use.
type Namespace interface {
	ReadAt(ctx context.Context, p []byte, off int64) error
	WriteAt(ctx context.Context, p []byte, off int64) error
	Flush(ctx context.Context) error
	Size() int64
	BlockSize() int
}

// Deallocator is implemented by namespaces that can discard a range
// (Dataset Management deallocate). Deallocated ranges read as zeroes.
type Deallocator interface {
	Deallocate(ctx context.Context, off, n int64) error
}

// ZeroWriter is implemented by namespaces that can zero a range without
// transferring data (Write Zeroes).
type ZeroWriter interface {
	WriteZeroes(ctx context.Context, off, n int64) error
}

// Starter is implemented by namespaces that can begin a transfer and let
// the caller wait for it separately, so one goroutine can put many
// transfers in flight (nof/target starts a read or write on the goroutine
// that decoded the command and waits elsewhere). Start never blocks on the
// device; the returned wait blocks until the transfer ended and must be
// called exactly once. p must not be touched (nor, for StartRead, read)
// until wait returned. A range error is returned by Start itself; every
// other outcome, as from ReadAt/WriteAt, by wait.
type Starter interface {
	StartRead(p []byte, off int64) (wait func() error, err error)
	StartWrite(p []byte, off int64) (wait func() error, err error)
}

// Batcher is implemented by Starters whose transfers can be gathered and
// handed to the device together (one system call for several commands
// that arrived back to back).
type Batcher interface {
	Starter
	NewBatch() Batch
}

// Batch is a Starter whose transfers are held until Submit. It belongs to
// one goroutine at a time; a wait it returned may block until Submit ran,
// so the caller must Submit before it waits or stops (and before anything
// it does could depend on those transfers finishing).
type Batch interface {
	Starter
	Submit()
}

// Immediate is implemented by namespaces whose ReadAt and WriteAt never
// wait for a device and take about as long as copying the bytes (memory):
// nof/target runs their commands on the goroutine that decoded them, with
// no hand-off to another goroutine per command.
type Immediate interface {
	Namespace
	Immediate()
}

// ErrOutOfRange is returned for accesses outside the namespace.
var ErrOutOfRange = errors.New("namespace: access out of range")

func checkRange(off, n, size int64) error {
	if off < 0 || n < 0 || off+n > size || off+n < off {
		return fmt.Errorf("%w: [%d, +%d) of %d", ErrOutOfRange, off, n, size)
	}
	return nil
}

// Memory is a namespace over a byte slice (for example a DRAM segment).
type Memory struct {
	block int

	mu  sync.RWMutex // guards the contents of buf against torn concurrent copies
	buf []byte
}

var (
	_ Namespace   = (*Memory)(nil)
	_ Deallocator = (*Memory)(nil)
	_ ZeroWriter  = (*Memory)(nil)
	_ Immediate   = (*Memory)(nil)
)

// Immediate marks Memory as a namespace whose transfers are plain copies.
func (*Memory) Immediate() {}

// NewMemory returns a namespace over buf; len(buf) must be a positive
// multiple of blockSize (a power of two, 512..65536).
func NewMemory(buf []byte, blockSize int) (*Memory, error) {
	if err := validBlock(blockSize); err != nil {
		return nil, err
	}
	if len(buf) == 0 || len(buf)%blockSize != 0 {
		return nil, fmt.Errorf("namespace: memory of %d bytes is not a positive multiple of block size %d", len(buf), blockSize)
	}
	return &Memory{buf: buf, block: blockSize}, nil
}

func validBlock(bs int) error {
	if bs < 512 || bs > 65536 || bs&(bs-1) != 0 {
		return fmt.Errorf("namespace: block size %d is not a power of two in 512..65536", bs)
	}
	return nil
}

func (m *Memory) ReadAt(_ context.Context, p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), int64(len(m.buf))); err != nil {
		return err
	}
	m.mu.RLock()
	copy(p, m.buf[off:])
	m.mu.RUnlock()
	return nil
}

func (m *Memory) WriteAt(_ context.Context, p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), int64(len(m.buf))); err != nil {
		return err
	}
	m.mu.Lock()
	copy(m.buf[off:], p)
	m.mu.Unlock()
	return nil
}

func (m *Memory) Flush(context.Context) error { return nil }
func (m *Memory) Size() int64                 { return int64(len(m.buf)) }
func (m *Memory) BlockSize() int              { return m.block }

func (m *Memory) Deallocate(ctx context.Context, off, n int64) error {
	return m.WriteZeroes(ctx, off, n)
}

func (m *Memory) WriteZeroes(_ context.Context, off, n int64) error {
	if err := checkRange(off, n, int64(len(m.buf))); err != nil {
		return err
	}
	m.mu.Lock()
	clear(m.buf[off : off+n])
	m.mu.Unlock()
	return nil
}
