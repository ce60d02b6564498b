//go:build !rdma

package transfer

import "github.com/kvtier/kvtier/rdma"

// newRDMATransport: without the rdma build tag there are no verbs, so RDMA
// is off and the routes skip it; the transport's logic (rdmatransport.go)
// is still built and tested over a fake fabric.
func newRDMATransport(e *Engine) (*rdmaTransport, string) {
	if e.cfg.RDMADevice == "off" {
		return nil, "off (--rdma-device off)"
	}
	return nil, "off: " + rdma.Reason()
}
