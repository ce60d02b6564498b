package target_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/namespace"
)

// The floor baseline: the least any NVMe/TCP target serving a file can do
// on this machine with its host on loopback. No protocol at all: the
// payload crosses a loopback TCP connection per I/O queue (one copy into
// the kernel, one out, as every NVMe/TCP data PDU does) and the file is
// read or written with O_DIRECT at the same block size and queue depth, by
// qd goroutines (a blocking pread/pwrite each, which keeps up with fio's
// libaio on its own: 1.6-2.2 GB/s of 128 KiB writes at depth 8 against
// fio's 1.4-2.0 in the same runs). What is left between our target and the floor is
// the protocol path's; what is left between the floor and fio is the
// price of moving the bytes through TCP on the same two vCPUs.

// floor runs streams floor connections at once for d, each with qd/streams
// (at least one) transfers in flight on its own slice of the file's first
// size bytes, as a host spreads its commands over that many I/O queues,
// and returns the MB/s they moved together. rw is "read" or "write".
func floor(b *testing.B, rw, path string, size int64, bs, qd, streams int, d time.Duration) float64 {
	depth := max(1, qd/streams)
	slice := size / int64(streams)
	slice -= slice % int64(bs)
	mbps := make([]float64, streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for k := range streams {
		wg.Go(func() {
			base := int64(k) * slice
			if rw == "read" {
				mbps[k], errs[k] = floorRead(path, base, slice, bs, depth, d)
			} else {
				mbps[k], errs[k] = floorWrite(path, base, slice, bs, depth, d)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("floor %s: %v", rw, err)
	}
	var sum float64
	for _, m := range mbps {
		sum += m
	}
	return sum
}

// floorRead reads bs-byte blocks of path's [base, base+size) sequentially
// (wrapping) with qd O_DIRECT readers and sends each over loopback TCP to
// a receiver for d; it returns MB/s received.
func floorRead(path string, base, size int64, bs, qd int, d time.Duration) (float64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	send, received, err := loopbackSink()
	if err != nil {
		return 0, err
	}
	free := make(chan []byte, qd)
	full := make(chan []byte, qd)
	for range qd {
		free <- namespace.AlignedBuffer(bs)
	}
	var (
		mu      sync.Mutex
		off     int64
		readErr error
		readers sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for range qd {
		readers.Go(func() {
			for time.Now().Before(end) {
				buf := <-free
				mu.Lock()
				o := off
				off = (off + int64(bs)) % size
				mu.Unlock()
				if _, err := f.ReadAt(buf, base+o); err != nil {
					mu.Lock()
					readErr = err
					mu.Unlock()
					return
				}
				full <- buf
			}
		})
	}
	go func() { readers.Wait(); close(full) }()
	var sendErr error
	for buf := range full {
		if sendErr == nil {
			_, sendErr = send.Write(buf)
		}
		free <- buf
	}
	send.Close()
	n, err := received()
	elapsed := time.Since(start)
	if err = errors.Join(readErr, sendErr, err); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds() / 1e6, nil
}

// floorWrite sends bs-byte blocks over loopback TCP for d; the receiver
// writes each to path's [base, base+size) sequentially (wrapping) with qd
// O_DIRECT writers. It returns MB/s written.
func floorWrite(path string, base, size int64, bs, qd int, d time.Duration) (float64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		type job struct {
			buf []byte
			off int64
		}
		free := make(chan []byte, qd)
		for range qd {
			free <- namespace.AlignedBuffer(bs)
		}
		jobs := make(chan job, qd)
		var (
			writers  sync.WaitGroup
			mu       sync.Mutex
			written  int64
			writeErr error
		)
		for range qd {
			writers.Go(func() {
				for j := range jobs {
					_, err := f.WriteAt(j.buf, base+j.off)
					mu.Lock()
					if err != nil && writeErr == nil {
						writeErr = err
					}
					if err == nil {
						written += int64(len(j.buf))
					}
					mu.Unlock()
					free <- j.buf
				}
			})
		}
		var off int64
		var readErr error
		for {
			buf := <-free
			if _, err := io.ReadFull(c, buf); err != nil {
				if err != io.EOF {
					readErr = err
				}
				break
			}
			jobs <- job{buf, off}
			off = (off + int64(bs)) % size
		}
		close(jobs)
		writers.Wait()
		done <- result{written, errors.Join(readErr, writeErr)}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	src := make([]byte, bs)
	var sendErr error
	start := time.Now()
	for time.Since(start) < d {
		if _, sendErr = c.Write(src); sendErr != nil {
			break
		}
	}
	c.Close()
	r := <-done
	elapsed := time.Since(start)
	if err := errors.Join(sendErr, r.err); err != nil {
		return 0, err
	}
	return float64(r.n) / elapsed.Seconds() / 1e6, nil
}

// loopbackSink returns the sending end of a loopback TCP connection and a
// function that waits for the receiver, which reads and discards until the
// sender closes, and returns the bytes it read (the floor's and rawTCP's
// receiver).
func loopbackSink() (net.Conn, func() (int64, error), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	type result struct {
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		// A plain read loop: io.Copy would read through io.Discard's
		// 8 KiB buffers, which costs the floor syscalls a target does not pay.
		buf := make([]byte, 128<<10)
		var n int64
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				got <- result{n, err}
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	return c, func() (int64, error) { r := <-got; return r.n, r.err }, nil
}
