package ssd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ncw/directio"
)

// FS is the seam every file operation of the tier goes through. OSFS is the
// real one; FaultInjector wraps any FS to inject errors in tests. Names are
// full paths.
type FS interface {
	// OpenFile opens name as os.OpenFile does. direct asks for O_DIRECT:
	// reads and writes on the result must then use Block-aligned memory,
	// offsets and lengths.
	OpenFile(name string, flag int, perm os.FileMode, direct bool) (File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	// ReadDir returns the names (not paths) of the entries of dir.
	ReadDir(dir string) ([]string, error)
	// Stat returns the size of name.
	Stat(name string) (int64, error)
	MkdirAll(dir string, perm os.FileMode) error
	// SyncDir makes the directory entries of dir durable (fsync on dir).
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on the file name (created
	// if missing), held until the returned Closer is closed.
	Lock(name string) (io.Closer, error)
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Sync makes written data durable (fdatasync).
	Sync() error
	Truncate(size int64) error
	// Allocate makes the file at least size bytes long with its blocks
	// allocated (fallocate(2) mode 0): later O_DIRECT writes below size
	// then neither extend the file nor allocate. It returns ErrNoAllocate
	// when the file system cannot do this (the caller writes without).
	Allocate(size int64) error
	Size() (int64, error)
	Close() error
}

// OSFS is the operating-system FS. Files opened with direct=true use
// O_DIRECT (github.com/ncw/directio), so data bypasses the page cache.
type OSFS struct{}

var (
	_ FS   = OSFS{}
	_ File = (*osFile)(nil)
)

// OpenFile implements FS.
func (OSFS) OpenFile(name string, flag int, perm os.FileMode, direct bool) (File, error) {
	var (
		f   *os.File
		err error
	)
	if direct {
		f, err = directio.OpenFile(name, flag, perm)
		if errors.Is(err, syscall.EINVAL) {
			return nil, fmt.Errorf("ssd: %s: the file system does not support O_DIRECT: %w", name, err)
		}
	} else {
		f, err = os.OpenFile(name, flag, perm)
	}
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Rename implements FS.
func (OSFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// Stat implements FS.
func (OSFS) Stat(name string) (int64, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

// SyncDir implements FS.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock implements FS with flock(2). On a read-only file system an existing
// lock file is locked through a read-only descriptor.
func (OSFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, syscall.EROFS) {
		f, err = os.Open(name)
	}
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is locked by another process or tier", name)
		}
		return nil, err
	}
	return f, nil // closing the descriptor releases the lock
}

type osFile struct{ f *os.File }

func (o *osFile) ReadAt(p []byte, off int64) (int, error)  { return o.f.ReadAt(p, off) }
func (o *osFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }
func (o *osFile) Truncate(size int64) error                { return o.f.Truncate(size) }
func (o *osFile) Close() error                             { return o.f.Close() }

// ErrNoAllocate is returned by File.Allocate on a file system without
// fallocate(2).
var ErrNoAllocate = errors.New("ssd: file system cannot preallocate")

// Allocate implements File with fallocate(2) mode 0 from the current size.
func (o *osFile) Allocate(size int64) error {
	cur, err := o.Size()
	if err != nil || size <= cur {
		return err
	}
	for {
		err = syscall.Fallocate(int(o.f.Fd()), 0, cur, size-cur)
		if err != syscall.EINTR {
			break
		}
	}
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return ErrNoAllocate
	}
	if err != nil {
		return &os.PathError{Op: "fallocate", Path: o.f.Name(), Err: err}
	}
	return nil
}

// Sync is fdatasync: the data and the size, not the timestamps.
func (o *osFile) Sync() error {
	for {
		err := syscall.Fdatasync(int(o.f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: o.f.Name(), Err: err}
			}
			return nil
		}
	}
}

func (o *osFile) Size() (int64, error) {
	fi, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
