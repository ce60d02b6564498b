package rest

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/doctor"
	"github.com/kvtier/kvtier/internal/buildinfo"
	"github.com/kvtier/kvtier/kverr"
)

// Undrainer is the optional capability of a master service that can undo a
// drain (found by type assertion; the master's gRPC server has it; it is
// not an RPC because only the master's own front end calls it).
type Undrainer interface {
	// DrainedSegments names node's segments an operator drained (draining
	// now, or unmounted by the drain and kept from remounting).
	DrainedSegments(ctx context.Context, node string) ([]string, error)
	// UndrainSegment lets segment name take allocations again if it is
	// still draining; if the drain already unmounted it, its owner's next
	// heartbeat remounts it.
	UndrainSegment(ctx context.Context, name string) error
}

// ApplianceDrainJSON answers POST appliances/{name}/drain and /undrain.
type ApplianceDrainJSON struct {
	Appliance string   `json:"appliance"`
	State     string   `json:"state"` // draining | undrained
	GraceMS   int64    `json:"grace_ms,omitempty"`
	Segments  []string `json:"segments"`
}

// applianceSegments lists the segments owned by appliance name. An appliance
// the master does not know is CLIENT_NOT_FOUND.
func (s *Server) applianceSegments(ctx context.Context, name string) ([]*kvtierpb.SegmentInfo, error) {
	cl, err := s.ms.ListClients(ctx, &kvtierpb.Empty{})
	if err != nil {
		return nil, err
	}
	known := false
	for _, c := range cl.GetClients() {
		if c.GetClientId() == name {
			known = true
		}
	}
	if !known {
		return nil, kverr.New(kverr.ClientNotFound, "", "no appliance %q is registered with the master (kvtier status lists them)", name)
	}
	segs, err := s.ms.ListSegments(ctx, &kvtierpb.Empty{})
	if err != nil {
		return nil, err
	}
	var out []*kvtierpb.SegmentInfo
	for _, si := range segs.GetSegments() {
		if si.GetSegment().GetNode() == name {
			out = append(out, si)
		}
	}
	return out, nil
}

func (s *Server) drainAppliance(c echo.Context) error {
	name := c.Param("name")
	var req DrainRequest
	if err := decodeJSON(c, &req, true); err != nil {
		return err
	}
	grace := int64(30000)
	if req.GraceMS != nil {
		grace = *req.GraceMS
	}
	if grace < 1 || grace > maxGrace.Milliseconds() {
		return kverr.New(kverr.InvalidParams, "", "grace_ms=%d: want 1 to %d", grace, maxGrace.Milliseconds())
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	segs, err := s.applianceSegments(ctx, name)
	if err != nil {
		return err
	}
	out := ApplianceDrainJSON{Appliance: name, State: "draining", GraceMS: grace, Segments: []string{}}
	for _, si := range segs {
		if si.GetState() == kvtierpb.SegmentState_DRAINING {
			out.Segments = append(out.Segments, si.GetSegment().GetName())
			continue // already draining: keep its deadline
		}
		n := si.GetSegment().GetName()
		if _, err := s.ms.UnmountSegment(ctx, &kvtierpb.UnmountSegmentRequest{Name: n, GraceMs: grace}); err != nil {
			return err
		}
		out.Segments = append(out.Segments, n)
	}
	return c.JSON(http.StatusAccepted, out)
}

func (s *Server) undrainAppliance(c echo.Context) error {
	name := c.Param("name")
	u, ok := s.ms.(Undrainer)
	if !ok {
		return kverr.New(kverr.UnavailableInCurrentStatus, "", "this master cannot undo a drain")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.applianceSegments(ctx, name); err != nil {
		return err
	}
	out := ApplianceDrainJSON{Appliance: name, State: "undrained", Segments: []string{}}
	names, err := u.DrainedSegments(ctx, name)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := u.UndrainSegment(ctx, n); err != nil {
			return err
		}
		out.Segments = append(out.Segments, n)
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) version(c echo.Context) error {
	return c.JSON(http.StatusOK, buildinfo.Get())
}

func (s *Server) doctor(c echo.Context) error {
	if s.cfg.Doctor == nil {
		return c.JSON(http.StatusOK, doctor.Run(c.Request().Context(), doctor.Config{}))
	}
	return c.JSON(http.StatusOK, s.cfg.Doctor(c.Request().Context()))
}
