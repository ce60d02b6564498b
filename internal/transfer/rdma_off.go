//go:build !rdma

package transfer

import (
	"context"

	"github.com/kvtier/kvtier/rdma"
)

// Without the rdma build tag there is no RDMA transport: newRDMATransport
// returns nil and the routes skip it. The methods below exist only so the
// engine compiles the same way in both builds.

type rdmaTransport struct{}

type rdmaSeg struct{}

func newRDMATransport(e *Engine) (*rdmaTransport, string) {
	if e.cfg.RDMADevice == "off" {
		return nil, "off (--rdma-device off)"
	}
	return nil, "off: " + rdma.Reason()
}

// RDMAStatus says whether this engine offers and uses RDMA, and why not.
func (e *Engine) RDMAStatus() (on bool, detail string) { return false, e.rdmaOff }

// RDMAAddr is the RDMA side channel's address ("" when RDMA is off).
func (e *Engine) RDMAAddr() string { return "" }

func (t *rdmaTransport) Name() string                               { return "rdma" }
func (t *rdmaTransport) reaches(r *reqState) bool                   { return false }
func (t *rdmaTransport) submit(ctx context.Context, rs []*reqState) {}
func (t *rdmaTransport) addr() string                               { return "" }
func (t *rdmaTransport) close()                                     {}
func (t *rdmaTransport) release()                                   {}
func (t *rdmaTransport) addSegment(s *segment)                      {}
func (t *rdmaTransport) dropSegment(s *segment)                     {}
func (t *rdmaTransport) offer(s *segment) SegmentOffer              { return SegmentOffer{} }
