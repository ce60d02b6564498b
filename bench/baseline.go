package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"kvtier/bench/hdr"
)

// Baseline names accepted by RunBaseline.
const (
	BaselineTCP    = "tcp"
	BaselineMemcpy = "memcpy"
)

// RawTCP measures a plain Go sender and receiver on loopback moving the same
// bytes kvtier moves: each of conns connections sends size-byte messages and
// waits for a 1-byte acknowledgement after each (one request/response per
// op, like a put). The receiver is a separate goroutine set that reads into
// one reused buffer per connection. It runs for duration.
func RawTCP(ctx context.Context, size, conns int, duration time.Duration) (Result, error) {
	if size <= 0 || conns <= 0 || duration <= 0 {
		return Result{}, fmt.Errorf("bench: RawTCP needs size, conns and duration > 0")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, fmt.Errorf("bench: listen: %w", err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var recvWG sync.WaitGroup
	var accepted []net.Conn
	var acceptMu sync.Mutex
	recvWG.Add(1)
	go func() { // receiver set: one goroutine per accepted connection
		defer recvWG.Done()
		for i := 0; i < conns; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			acceptMu.Lock()
			accepted = append(accepted, c)
			acceptMu.Unlock()
			recvWG.Add(1)
			go func() {
				defer recvWG.Done()
				buf := make([]byte, min(size, 4<<20))
				ack := []byte{1}
				for {
					for left := size; left > 0; {
						n, err := c.Read(buf[:min(left, len(buf))])
						if err != nil {
							return
						}
						left -= n
					}
					if _, err := c.Write(ack); err != nil {
						return
					}
				}
			}()
		}
	}()
	defer func() {
		acceptMu.Lock()
		for _, c := range accepted {
			c.Close()
		}
		acceptMu.Unlock()
		ln.Close()
		recvWG.Wait()
	}()

	senders := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range senders {
			c.Close()
		}
	}()
	var d net.Dialer
	for i := 0; i < conns; i++ {
		c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return Result{}, fmt.Errorf("bench: dial: %w", err)
		}
		senders = append(senders, c)
	}
	var stop atomic.Bool
	hists := make([]hdr.Histogram, conns)
	counts := make([]int64, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.AfterFunc(duration, func() { stop.Store(true) })
	defer timer.Stop()
	stopOnCancel := context.AfterFunc(ctx, func() {
		for _, c := range senders {
			c.SetDeadline(time.Now())
		}
	})
	defer stopOnCancel()
	for i, c := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := make([]byte, size)
			for j := 0; j < len(msg); j += 4096 {
				msg[j] = 1
			}
			ack := make([]byte, 1)
			for first := true; first || !stop.Load(); first = false {
				t0 := time.Now()
				if _, err := c.Write(msg); err != nil {
					errs[i] = err
					return
				}
				if _, err := io.ReadFull(c, ack); err != nil {
					errs[i] = err
					return
				}
				hists[i].Record(time.Since(t0).Nanoseconds())
				counts[i]++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	r := Result{System: BaselineTCP, Op: "send", Size: size, Concurrency: conns, Batch: 1}
	var h hdr.Histogram
	for i := range hists {
		h.Merge(&hists[i])
		r.Ops += counts[i]
		if errs[i] != nil {
			r.Errors++
		}
	}
	if err := errors.Join(errs...); err != nil && r.Ops == 0 {
		return Result{}, fmt.Errorf("bench: RawTCP: %w", err)
	}
	r.finish(elapsed, &h)
	return r, nil
}

// Memcpy measures copy() of size bytes between two pre-faulted buffers on one
// goroutine for duration.
func Memcpy(size int, duration time.Duration) Result {
	src, dst := make([]byte, size), make([]byte, size)
	for i := 0; i < size; i += 4096 {
		src[i], dst[i] = 1, 1
	}
	var h hdr.Histogram
	r := Result{System: BaselineMemcpy, Op: "copy", Size: size, Concurrency: 1, Batch: 1}
	start := time.Now()
	deadline := start.Add(duration)
	for {
		t0 := time.Now()
		if !t0.Before(deadline) {
			break
		}
		copy(dst, src)
		h.Record(time.Since(t0).Nanoseconds())
		r.Ops++
	}
	r.finish(time.Since(start), &h)
	return r
}

// RunBaseline measures baseline name (tcp or memcpy) at every size of o
// (and, for tcp, every concurrency), each for o.Duration.
func RunBaseline(ctx context.Context, name string, o Options) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	var out []Result
	for _, size := range o.Sizes {
		switch name {
		case BaselineMemcpy:
			if err := ctx.Err(); err != nil {
				return out, err
			}
			out = append(out, Memcpy(size, o.Duration))
		case BaselineTCP:
			for _, c := range o.Concurrency {
				r, err := RawTCP(ctx, size, c, o.Duration)
				if err != nil {
					return out, err
				}
				out = append(out, r)
			}
		default:
			return nil, fmt.Errorf("bench: unknown baseline %q (want tcp or memcpy)", name)
		}
	}
	return out, nil
}
