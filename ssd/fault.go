package ssd

import (
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
)

// FaultInjector is a fault-injecting FS for tests: it wraps a real FS (usually
// OSFS, so bytes still reach a real file system) and makes chosen operations
// fail the way a failing disk does. It is a fake only for the faults; all
// data goes through the wrapped FS. The zero value is not usable; build it
// with NewFaultInjector. Safe for concurrent use.
type FaultInjector struct {
	inner FS

	mu sync.Mutex
	// Fields below are guarded by mu.
	readOnly   bool  // every mutation fails with EROFS
	writeLimit int64 // bytes that may still be written; <0 = unlimited
	writeErr   error // returned once writeLimit is used up
	writeMatch string
	readErr    error // returned by reads of files whose name contains readMatch
	readMatch  string
	gate       *ReadGate // blocks reads of files whose name contains gate.match
	shortMatch string    // files whose name contains it look shortSize bytes long
	shortSize  int64
	syncErr    error // returned by Sync of files whose name contains syncMatch
	syncMatch  string
}

var (
	_ FS   = (*FaultInjector)(nil)
	_ File = (*faultFile)(nil)
)

// NewFaultInjector returns a FaultInjector over inner with no fault armed.
func NewFaultInjector(inner FS) *FaultInjector {
	return &FaultInjector{inner: inner, writeLimit: -1}
}

// SetReadOnly makes every mutation (create, write, sync, truncate, remove,
// rename, mkdir) fail with EROFS, as on a file system remounted read-only.
func (f *FaultInjector) SetReadOnly(ro bool) {
	f.mu.Lock()
	f.readOnly = ro
	f.mu.Unlock()
}

// FailWritesAfter lets n more bytes be written to files whose name contains
// match ("" = all files), then fails writes with err (for example
// syscall.ENOSPC). The write that crosses the limit writes its allowed
// prefix first (rounded down to Block for O_DIRECT files) and returns a short
// count with err: a torn write. n < 0 disarms.
func (f *FaultInjector) FailWritesAfter(match string, n int64, err error) {
	f.mu.Lock()
	f.writeMatch, f.writeLimit, f.writeErr = match, n, err
	f.mu.Unlock()
}

// FailReads makes reads of files whose name contains match fail with err;
// a nil err disarms.
func (f *FaultInjector) FailReads(match string, err error) {
	f.mu.Lock()
	f.readMatch, f.readErr = match, err
	f.mu.Unlock()
}

// FailSyncs makes Sync (fdatasync) of files whose name contains match fail
// with err, as a disk that loses a flush does; a nil err disarms.
func (f *FaultInjector) FailSyncs(match string, err error) {
	f.mu.Lock()
	f.syncMatch, f.syncErr = match, err
	f.mu.Unlock()
}

// ShortFiles makes files whose name contains match look at most size bytes
// long (Stat, Size, reads past size hit EOF), as after a lost tail; an
// empty match disarms.
func (f *FaultInjector) ShortFiles(match string, size int64) {
	f.mu.Lock()
	f.shortMatch, f.shortSize = match, size
	f.mu.Unlock()
}

// shortLimit returns the size limit for name, or -1.
func (f *FaultInjector) shortLimit(name string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shortMatch != "" && strings.Contains(name, f.shortMatch) {
		return f.shortSize
	}
	return -1
}

// ReadGate holds reads of matching files until Release.
type ReadGate struct {
	match   string
	entered chan struct{} // receives one value per read that reached the gate
	release chan struct{}
	once    sync.Once
}

// Entered delivers one value each time a read blocks at the gate.
func (g *ReadGate) Entered() <-chan struct{} { return g.entered }

// Release lets every held and future read through.
func (g *ReadGate) Release() { g.once.Do(func() { close(g.release) }) }

// HoldReads blocks ReadAt on files whose name contains match until the
// returned gate is released. Only reads that start after the call are held.
func (f *FaultInjector) HoldReads(match string) *ReadGate {
	g := &ReadGate{match: match, entered: make(chan struct{}, 64), release: make(chan struct{})}
	f.mu.Lock()
	f.gate = g
	f.mu.Unlock()
	return g
}

func erofs(op, name string) error {
	return &os.PathError{Op: op, Path: name, Err: syscall.EROFS}
}

func (f *FaultInjector) isReadOnly() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readOnly
}

// OpenFile implements FS.
func (f *FaultInjector) OpenFile(name string, flag int, perm os.FileMode, direct bool) (File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0 && f.isReadOnly() {
		return nil, erofs("open", name)
	}
	inner, err := f.inner.OpenFile(name, flag, perm, direct)
	if err != nil {
		return nil, err
	}
	return &faultFile{fi: f, inner: inner, name: name, direct: direct}, nil
}

// Remove implements FS.
func (f *FaultInjector) Remove(name string) error {
	if f.isReadOnly() {
		return erofs("remove", name)
	}
	return f.inner.Remove(name)
}

// Rename implements FS.
func (f *FaultInjector) Rename(oldname, newname string) error {
	if f.isReadOnly() {
		return erofs("rename", oldname)
	}
	return f.inner.Rename(oldname, newname)
}

// ReadDir implements FS.
func (f *FaultInjector) ReadDir(dir string) ([]string, error) { return f.inner.ReadDir(dir) }

// Stat implements FS.
func (f *FaultInjector) Stat(name string) (int64, error) {
	n, err := f.inner.Stat(name)
	if lim := f.shortLimit(name); err == nil && lim >= 0 && n > lim {
		n = lim
	}
	return n, err
}

// MkdirAll implements FS.
func (f *FaultInjector) MkdirAll(dir string, perm os.FileMode) error {
	if f.isReadOnly() {
		return erofs("mkdir", dir)
	}
	return f.inner.MkdirAll(dir, perm)
}

// Lock implements FS.
func (f *FaultInjector) Lock(name string) (io.Closer, error) { return f.inner.Lock(name) }

// SyncDir implements FS.
func (f *FaultInjector) SyncDir(dir string) error { return f.inner.SyncDir(dir) }

type faultFile struct {
	fi     *FaultInjector
	inner  File
	name   string
	direct bool
}

func (ff *faultFile) ReadAt(p []byte, off int64) (int, error) {
	ff.fi.mu.Lock()
	rerr, rmatch, gate := ff.fi.readErr, ff.fi.readMatch, ff.fi.gate
	ff.fi.mu.Unlock()
	if gate != nil && strings.Contains(ff.name, gate.match) {
		select {
		case gate.entered <- struct{}{}:
		default:
		}
		<-gate.release
	}
	if rerr != nil && strings.Contains(ff.name, rmatch) {
		return 0, &os.PathError{Op: "read", Path: ff.name, Err: rerr}
	}
	if lim := ff.fi.shortLimit(ff.name); lim >= 0 && off+int64(len(p)) > lim {
		if off >= lim {
			return 0, io.EOF
		}
		n, err := ff.inner.ReadAt(p[:lim-off], off)
		if err == nil {
			err = io.EOF
		}
		return n, err
	}
	return ff.inner.ReadAt(p, off)
}

func (ff *faultFile) WriteAt(p []byte, off int64) (int, error) {
	ff.fi.mu.Lock()
	if ff.fi.readOnly {
		ff.fi.mu.Unlock()
		return 0, erofs("write", ff.name)
	}
	allow := int64(len(p))
	var werr error
	if ff.fi.writeLimit >= 0 && strings.Contains(ff.name, ff.fi.writeMatch) {
		if allow > ff.fi.writeLimit {
			allow = ff.fi.writeLimit
			if ff.direct {
				allow &^= Block - 1
			}
			werr = &os.PathError{Op: "write", Path: ff.name, Err: ff.fi.writeErr}
		}
		ff.fi.writeLimit -= allow
	}
	ff.fi.mu.Unlock()
	n := 0
	if allow > 0 {
		var err error
		n, err = ff.inner.WriteAt(p[:allow], off)
		if err != nil {
			return n, err
		}
	}
	return n, werr
}

func (ff *faultFile) Sync() error {
	if ff.fi.isReadOnly() {
		return erofs("fdatasync", ff.name)
	}
	ff.fi.mu.Lock()
	serr, smatch := ff.fi.syncErr, ff.fi.syncMatch
	ff.fi.mu.Unlock()
	if serr != nil && strings.Contains(ff.name, smatch) {
		return &os.PathError{Op: "fdatasync", Path: ff.name, Err: serr}
	}
	return ff.inner.Sync()
}

func (ff *faultFile) Truncate(size int64) error {
	if ff.fi.isReadOnly() {
		return erofs("truncate", ff.name)
	}
	return ff.inner.Truncate(size)
}

func (ff *faultFile) Allocate(size int64) error {
	if ff.fi.isReadOnly() {
		return erofs("fallocate", ff.name)
	}
	return ff.inner.Allocate(size)
}

func (ff *faultFile) Size() (int64, error) {
	n, err := ff.inner.Size()
	if lim := ff.fi.shortLimit(ff.name); err == nil && lim >= 0 && n > lim {
		n = lim
	}
	return n, err
}
func (ff *faultFile) Close() error { return ff.inner.Close() }
