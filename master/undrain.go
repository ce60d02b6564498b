package master

import (
	"context"
	"sort"

	"github.com/kvtier/kvtier/kverr"
)

// DrainedSegments names the segments of node an operator drained: still
// draining, or already unmounted by the drain (heartbeats do not remount
// those). A node the master does not know is CLIENT_NOT_FOUND.
func (m *Master) DrainedSegments(_ context.Context, node string) ([]string, error) {
	c := m.clients.get(node)
	if c == nil {
		return nil, kverr.New(kverr.ClientNotFound, "", "no client %q", node)
	}
	c.mu.Lock()
	out := make([]string, 0, len(c.drained))
	for n := range c.drained {
		out = append(out, n)
	}
	c.mu.Unlock()
	sort.Strings(out)
	return out, nil
}

// UndrainSegment undoes a drain of segment name: a segment still draining
// takes allocations again at once; one the drain already unmounted is
// remounted by its owner's next heartbeat (the drained mark that kept
// heartbeats from remounting it is cleared).
func (m *Master) UndrainSegment(_ context.Context, name string) error {
	if s := m.segs.get(name); s != nil {
		s.state.CompareAndSwap(int32(SegDraining), int32(SegMounted))
		s.owner.mu.Lock()
		delete(s.owner.drained, name)
		s.owner.mu.Unlock()
		m.publish(Event{Kind: "segment", Segment: name, Node: s.spec.Node, Message: "undrained"})
		return nil
	}
	m.clients.mu.RLock()
	var owner *client
	for _, c := range m.clients.byID {
		if c.isDrained(name) {
			owner = c
			break
		}
	}
	m.clients.mu.RUnlock()
	if owner == nil {
		return kverr.New(kverr.SegmentNotFound, "", "segment %q is neither mounted nor drained", name)
	}
	owner.mu.Lock()
	delete(owner.drained, name)
	owner.mu.Unlock()
	m.publish(Event{Kind: "segment", Segment: name, Node: owner.id, Message: "undrained: remounted at the next heartbeat"})
	return nil
}

// DrainedSegments and UndrainSegment on the gRPC server are the REST front
// end's undrain capability (rest.Undrainer); they are not RPCs.
func (g *grpcServer) DrainedSegments(ctx context.Context, node string) ([]string, error) {
	return g.m.DrainedSegments(ctx, node)
}

func (g *grpcServer) UndrainSegment(ctx context.Context, name string) error {
	return g.m.UndrainSegment(ctx, name)
}
