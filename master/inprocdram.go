package master

import (
	"context"
	"io"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// DramRecordsConn is an appliance's TakeDramRecords stream to a master of
// the same process (a standalone): the same messages as the gRPC stream
// (grpcServer.TakeDramRecords), without the handler's goroutines or any
// copy between them. Send applies the acknowledgement in the caller's
// goroutine, which wakes whoever waits for it (a PutEnd, a Remove's free)
// at once; Recv waits for the records itself, so a record queued by a
// PutStart wakes the appliance's stream goroutine and no other. One
// goroutine calls Send and Recv in turn; Recv's answer is reused by the
// next Recv (the appliance copies what it keeps).
type DramRecordsConn struct {
	m        *Master
	ctx      context.Context
	cancel   context.CancelFunc
	client   string
	answered bool   // the first answer (wait 0: names the outbox) went
	sent     uint64 // the records up to sent were answered on this stream
	timer    *time.Timer
	out      kvtierpb.TakeDramRecordsResponse
	recs     []kvtierpb.DramRecord
	keys     []byte
}

// OpenDramRecords opens an in-process DRAM records stream; it ends with
// ctx, or when the master stops (Recv then answers io.EOF, as the gRPC
// stream does, and the appliance opens another).
func (m *Master) OpenDramRecords(ctx context.Context) *DramRecordsConn {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-m.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	return &DramRecordsConn{m: m, ctx: ctx, cancel: cancel}
}

// Send acknowledges the records applied (outbox up to ack_through); the
// first names the client and starts its queue.
func (c *DramRecordsConn) Send(r *kvtierpb.TakeDramRecordsRequest) error {
	if err := c.ctx.Err(); err != nil {
		return io.EOF
	}
	if c.client == "" {
		c.client = r.GetClientId()
	} else if r.GetClientId() != c.client {
		return toGRPC(kverr.New(kverr.InvalidParams, "", "dram records: client %q on a stream of %q", r.GetClientId(), c.client))
	}
	return toGRPC(c.m.AckDramRecords(c.client, r.GetOutbox(), r.GetAckThrough()))
}

// Recv returns the next records (or at once, the first time, the outbox
// with none), waiting for them as long as the stream lasts.
func (c *DramRecordsConn) Recv() (*kvtierpb.TakeDramRecordsResponse, error) {
	if c.client == "" {
		return nil, toGRPC(kverr.New(kverr.InvalidParams, "", "dram records: Recv before the first Send"))
	}
	for {
		wait := time.Second
		if !c.answered {
			wait = 0
		}
		outbox, reset, rs, err := c.m.nextDramRecords(c.ctx, c.client, c.sent, wait, &c.timer)
		if err != nil {
			return nil, toGRPC(err)
		}
		if c.ctx.Err() != nil {
			c.close()
			return nil, io.EOF
		}
		if c.answered && len(rs) == 0 && !reset {
			continue
		}
		c.answered = true
		dramRecordsPB(&c.out, &c.recs, &c.keys, outbox, reset, rs)
		if len(rs) > 0 {
			c.sent = rs[len(rs)-1].Seq
		}
		return &c.out, nil
	}
}

func (c *DramRecordsConn) close() {
	c.cancel()
	if c.timer != nil {
		c.timer.Stop()
	}
}
