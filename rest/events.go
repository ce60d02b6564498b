package rest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// eventStream is an in-process grpc.ServerStreamingServer[Event]: the
// master's WatchEvents pushes into ch, the SSE handler drains it. Send blocks
// (the master decides whether to drop for slow watchers) until the request
// context ends.
type eventStream struct {
	ctx context.Context
	ch  chan *kvtierpb.Event
}

var _ grpc.ServerStreamingServer[kvtierpb.Event] = (*eventStream)(nil)

func (e *eventStream) Send(ev *kvtierpb.Event) error {
	select {
	case e.ch <- ev:
		return nil
	case <-e.ctx.Done():
		return e.ctx.Err()
	}
}
func (e *eventStream) SetHeader(metadata.MD) error  { return nil }
func (e *eventStream) SendHeader(metadata.MD) error { return nil }
func (e *eventStream) SetTrailer(metadata.MD)       {}
func (e *eventStream) Context() context.Context     { return e.ctx }
func (e *eventStream) SendMsg(m any) error {
	ev, ok := m.(*kvtierpb.Event)
	if !ok {
		return kverr.New(kverr.InternalError, "", "event stream: unexpected message %T", m)
	}
	return e.Send(ev)
}
func (e *eventStream) RecvMsg(any) error {
	return kverr.New(kverr.InternalError, "", "event stream: RecvMsg on a server stream")
}

var errNotFlusher = errors.New("response writer cannot flush")

// EventJSON is one event on the SSE stream.
type EventJSON struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Tenant  string    `json:"tenant,omitempty"`
	Key     string    `json:"key,omitempty"`
	KeyB64  string    `json:"key_b64,omitempty"`
	Segment string    `json:"segment,omitempty"`
	Node    string    `json:"node,omitempty"`
	Bytes   uint64    `json:"bytes,omitempty"`
	Message string    `json:"message,omitempty"`
}

func eventJSON(ev *kvtierpb.Event) EventJSON {
	j := EventJSON{Time: time.UnixMilli(ev.GetTimeMs()).UTC(), Kind: ev.GetKind(), Tenant: ev.GetTenant(),
		Segment: ev.GetSegment(), Node: ev.GetNode(), Bytes: ev.GetBytes(), Message: ev.GetMessage()}
	if k := ev.GetKey(); len(k) > 0 {
		j.Key = keyText(k)
		j.KeyB64 = base64.RawURLEncoding.EncodeToString(k)
	}
	return j
}

// events streams the master's events as server-sent events until the client
// disconnects or the master's stream ends.
func (s *Server) events(c echo.Context) error {
	w := c.Response()
	flusher, ok := w.Writer.(http.Flusher)
	if !ok {
		return kverr.New(kverr.InternalError, "", "%v", errNotFlusher)
	}
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	st := &eventStream{ctx: ctx, ch: make(chan *kvtierpb.Event, 64)}
	done := make(chan error, 1)
	go func() { done <- s.ms.WatchEvents(&kvtierpb.Empty{}, st) }()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 3000\n: connected\n\n"); err != nil {
		return nil
	}
	flusher.Flush()

	tick := time.NewTicker(s.cfg.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-done:
			msg := "event stream ended"
			if err != nil && ctx.Err() == nil {
				msg = errorBody(err, c.Request()).Message
			}
			b, _ := json.Marshal(map[string]string{"message": msg})
			fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
			flusher.Flush()
			return nil
		case ev := <-st.ch:
			b, err := json.Marshal(eventJSON(ev))
			if err != nil {
				continue
			}
			kind := ev.GetKind()
			if kind == "" {
				kind = "message"
			}
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", sanitizeEventName(kind), b); err != nil {
				return nil
			}
			flusher.Flush()
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			flusher.Flush()
		}
	}
}

// sanitizeEventName keeps an SSE event name on one line.
func sanitizeEventName(k string) string {
	b := []byte(k)
	for i, c := range b {
		if c == '\n' || c == '\r' || c == ':' {
			b[i] = '_'
		}
	}
	return string(b)
}
