package main

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
)

// inprocDramRecords opens a standalone's DRAM records stream
// (TakeDramRecords) to the master of the same process: the master's own
// handler runs on a pair of channels instead of an HTTP/2 stream over
// loopback. Every message is cloned as it crosses, because both sides
// reuse theirs after Send (which gRPC allows: it has marshalled them).
func inprocDramRecords(ms kvtierpb.MasterServer) func(context.Context) (appliance.DramRecordsStream, error) {
	return func(ctx context.Context) (appliance.DramRecordsStream, error) {
		ctx, cancel := context.WithCancel(ctx)
		p := &dramPipe{ctx: ctx, cancel: cancel, up: make(chan *kvtierpb.TakeDramRecordsRequest, 16),
			down: make(chan *kvtierpb.TakeDramRecordsResponse, 16), done: make(chan struct{})}
		go func() {
			err := ms.TakeDramRecords(dramServerSide{p})
			if err == nil {
				err = io.EOF
			}
			p.err = err
			close(p.done)
			cancel()
		}()
		return dramClientSide{p}, nil
	}
}

type dramPipe struct {
	ctx    context.Context
	cancel context.CancelFunc
	up     chan *kvtierpb.TakeDramRecordsRequest
	down   chan *kvtierpb.TakeDramRecordsResponse
	done   chan struct{} // the handler returned
	err    error         // why; set before done closes
}

// dramClientSide is the appliance's end.
type dramClientSide struct{ p *dramPipe }

func (c dramClientSide) Send(r *kvtierpb.TakeDramRecordsRequest) error {
	select {
	case c.p.up <- proto.Clone(r).(*kvtierpb.TakeDramRecordsRequest):
		return nil
	case <-c.p.done:
		return c.p.err
	case <-c.p.ctx.Done():
		return c.p.ctx.Err()
	}
}

func (c dramClientSide) Recv() (*kvtierpb.TakeDramRecordsResponse, error) {
	select {
	case r := <-c.p.down:
		return r, nil
	case <-c.p.done:
		return nil, c.p.err
	case <-c.p.ctx.Done():
		return nil, c.p.ctx.Err()
	}
}

// dramServerSide is the master handler's end. Only Context, Send and Recv
// are called by it; the rest of grpc.ServerStream is not implemented.
type dramServerSide struct {
	p *dramPipe
}

var _ grpc.BidiStreamingServer[kvtierpb.TakeDramRecordsRequest, kvtierpb.TakeDramRecordsResponse] = dramServerSide{}

func (s dramServerSide) Context() context.Context { return s.p.ctx }

func (s dramServerSide) Send(r *kvtierpb.TakeDramRecordsResponse) error {
	select {
	case s.p.down <- proto.Clone(r).(*kvtierpb.TakeDramRecordsResponse):
		return nil
	case <-s.p.ctx.Done():
		return s.p.ctx.Err()
	}
}

func (s dramServerSide) Recv() (*kvtierpb.TakeDramRecordsRequest, error) {
	select {
	case r := <-s.p.up:
		return r, nil
	case <-s.p.ctx.Done():
		return nil, io.EOF
	}
}

var errNotInproc = errors.New("not available on an in-process stream")

func (dramServerSide) SetHeader(metadata.MD) error  { return errNotInproc }
func (dramServerSide) SendHeader(metadata.MD) error { return errNotInproc }
func (dramServerSide) SetTrailer(metadata.MD)       {}
func (dramServerSide) SendMsg(any) error            { return errNotInproc }
func (dramServerSide) RecvMsg(any) error            { return errNotInproc }
