package rest

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

func (s *Server) health(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"status": "ok", "time": s.clk.Now().UTC()})
}

// ReadyJSON is the body of GET ready (200 or 503).
type ReadyJSON struct {
	Ready    bool   `json:"ready"`
	Reason   string `json:"reason,omitempty"`
	Segments int    `json:"mounted_segments"`
	Leader   bool   `json:"leader"`
	// Rebuilding: the master waits for appliances' DRAM directory reports
	// (a restart or a new leader); reads of keys not yet reported and puts
	// answer UNAVAILABLE_IN_CURRENT_STATUS until then.
	Rebuilding bool `json:"rebuilding"`
	// Degraded: ready, but an appliance (a client serving storage) is
	// suspect, left or reports a problem; Reasons name each, and its
	// replicas are not handed out meanwhile.
	Degraded bool     `json:"degraded"`
	Reasons  []string `json:"reasons,omitempty"`
}

// ready: at least one segment mounted, every SSD index loaded, this master
// the leader, then Config.Ready. A ready cluster with an appliance down or
// unhealthy answers 200 with degraded true and the reasons (it still
// serves from the others; a 503 would take the master out of rotation).
func (s *Server) ready(c echo.Context) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	out := ReadyJSON{}
	notReady := func(reason string) error {
		out.Reason = reason
		return c.JSON(http.StatusServiceUnavailable, out)
	}
	st, err := s.ms.Stats(ctx, &kvtierpb.Empty{})
	if err != nil {
		return notReady("master stats: " + errorBody(err, c.Request()).Message)
	}
	out.Leader = st.GetLeader()
	out.Rebuilding = st.GetRebuilding()
	segs, err := s.ms.ListSegments(ctx, &kvtierpb.Empty{})
	if err != nil {
		return notReady("listing segments: " + errorBody(err, c.Request()).Message)
	}
	for _, sg := range segs.GetSegments() {
		if sg.GetState() == kvtierpb.SegmentState_MOUNTED {
			out.Segments++
		}
	}
	if !out.Leader {
		return notReady("this master is not the leader")
	}
	if out.Segments == 0 {
		return notReady("no segment is mounted")
	}
	if out.Rebuilding {
		return notReady("rebuilding: " + st.GetRebuildReason())
	}
	cl, err := s.ms.ListClients(ctx, &kvtierpb.Empty{})
	if err != nil {
		return notReady("listing clients: " + errorBody(err, c.Request()).Message)
	}
	for _, ci := range cl.GetClients() {
		if d := ci.GetDisk(); d != nil && d.GetCapacity() > 0 && !d.GetIndexLoaded() && ci.GetState() == kvtierpb.ClientState_LIVE {
			return notReady("SSD index of " + ci.GetClientId() + " is still loading")
		}
		// A gone appliance has left the cluster (its event said so);
		// suspect and unhealthy ones degrade it.
		if ci.GetStorage() && ci.GetState() != kvtierpb.ClientState_GONE && len(ci.GetProblems()) > 0 {
			out.Reasons = append(out.Reasons, "appliance "+ci.GetClientId()+" "+clientState(ci.GetState())+": "+strings.Join(ci.GetProblems(), "; "))
		}
	}
	out.Degraded = len(out.Reasons) > 0
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(ctx); err != nil {
			return notReady(err.Error())
		}
	}
	out.Ready = true
	if out.Degraded {
		out.Reason = "degraded: " + strings.Join(out.Reasons, " | ")
	}
	return c.JSON(http.StatusOK, out)
}

// SegmentJSON is one segment.
type SegmentJSON struct {
	Name          string     `json:"name"`
	NamePath      string     `json:"name_path"`
	Type          string     `json:"type"`
	Owner         string     `json:"owner"`
	Endpoint      string     `json:"endpoint,omitempty"`
	State         string     `json:"state"` // mounted | draining | grace
	Capacity      uint64     `json:"capacity"`
	Used          uint64     `json:"used"`
	LargestFree   uint64     `json:"largest_free"`
	Replicas      uint64     `json:"replicas"`
	DrainDeadline *time.Time `json:"drain_deadline,omitempty"`
	NQN           string     `json:"nqn,omitempty"`
	TargetAddr    string     `json:"target_addr,omitempty"`
}

func segmentState(s kvtierpb.SegmentState) string {
	switch s {
	case kvtierpb.SegmentState_MOUNTED:
		return "mounted"
	case kvtierpb.SegmentState_DRAINING:
		return "draining"
	case kvtierpb.SegmentState_GRACE:
		return "grace"
	}
	return "unknown"
}

func (s *Server) listSegments(c echo.Context) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	resp, err := s.ms.ListSegments(ctx, &kvtierpb.Empty{})
	if err != nil {
		return err
	}
	out := make([]SegmentJSON, 0, len(resp.GetSegments()))
	for _, si := range resp.GetSegments() {
		sg := si.GetSegment()
		out = append(out, SegmentJSON{
			Name: sg.GetName(), NamePath: escapeSegment(sg.GetName()), Type: sg.GetType().String(),
			Owner: sg.GetNode(), Endpoint: sg.GetEndpoint(), State: segmentState(si.GetState()),
			Capacity: sg.GetSize(), Used: si.GetUsed(), LargestFree: si.GetLargestFree(),
			Replicas: si.GetReplicas(), DrainDeadline: msTime(si.GetDrainDeadlineMs()),
			NQN: sg.GetNqn(), TargetAddr: sg.GetTargetAddr(),
		})
	}
	return c.JSON(http.StatusOK, map[string]any{"segments": out})
}

// DrainRequest is the optional body of POST segments/{name}/drain.
type DrainRequest struct {
	// GraceMS is how long reads are still served before unmount; default 30000.
	GraceMS *int64 `json:"grace_ms"`
}

// maxGrace bounds a drain's grace period.
const maxGrace = 24 * time.Hour

func (s *Server) drainSegment(c echo.Context) error {
	name, err := segmentParam(c)
	if err != nil {
		return err
	}
	var req DrainRequest
	if err := decodeJSON(c, &req, true); err != nil {
		return err
	}
	grace := int64(30000)
	if req.GraceMS != nil {
		grace = *req.GraceMS
	}
	if grace < 1 || grace > maxGrace.Milliseconds() {
		return kverr.New(kverr.InvalidParams, "", "grace_ms=%d: want 1 to %d (use DELETE to unmount at once)", grace, maxGrace.Milliseconds())
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.ms.UnmountSegment(ctx, &kvtierpb.UnmountSegmentRequest{Name: name, GraceMs: grace}); err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, map[string]any{"segment": name, "state": "draining", "grace_ms": grace})
}

func (s *Server) unmountSegment(c echo.Context) error {
	name, err := segmentParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.ms.UnmountSegment(ctx, &kvtierpb.UnmountSegmentRequest{Name: name}); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// decodeJSON strictly decodes the request body into v: unknown fields,
// trailing data and malformed JSON are INVALID_PARAMS. An empty body is
// allowed only when optional.
func decodeJSON(c echo.Context, v any, optional bool) error {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, 1<<20+1))
	if err != nil {
		return kverr.New(kverr.InvalidParams, "", "reading body: %v", err)
	}
	if len(body) > 1<<20 {
		return kverr.New(kverr.PayloadTooLarge, "", "JSON body over 1 MiB")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return kverr.New(kverr.InvalidParams, "", "a JSON body is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return kverr.New(kverr.InvalidParams, "", "malformed JSON: %v", err)
	}
	if dec.More() {
		return kverr.New(kverr.InvalidParams, "", "malformed JSON: data after the object")
	}
	return nil
}

// TiersJSON is GET tiers.
type TiersJSON struct {
	DRAM  DramJSON   `json:"dram"`
	SSD   SSDJSON    `json:"ssd"`
	Stats []TierJSON `json:"stats"`
}

// DramJSON holds the DRAM tier settings.
type DramJSON struct {
	HighWatermark float64 `json:"high_watermark"`
	EvictionRatio float64 `json:"eviction_ratio"`
	LeasePolicy   string  `json:"lease_policy"`
}

// SSDJSON holds the SSD tier settings.
type SSDJSON struct {
	OffloadMode   string  `json:"offload_mode"`
	Policy        string  `json:"policy"`
	Capacity      uint64  `json:"capacity"`
	HighWatermark float64 `json:"high_watermark"`
}

// TierJSON is one tier's figures.
type TierJSON struct {
	Tier     string  `json:"tier"`
	Capacity uint64  `json:"capacity"`
	Used     uint64  `json:"used"`
	Objects  uint64  `json:"objects"` // replicas held (memory, nof); objects (disk)
	Hits     uint64  `json:"hits"`
	Misses   uint64  `json:"misses"`
	UsedFrac float64 `json:"used_fraction"`
}

func tierJSON(t *kvtierpb.TierStats) TierJSON {
	j := TierJSON{Tier: t.GetTier(), Capacity: t.GetCapacity(), Used: t.GetUsed(), Objects: t.GetObjects(), Hits: t.GetHits(), Misses: t.GetMisses()}
	if j.Capacity > 0 {
		j.UsedFrac = float64(j.Used) / float64(j.Capacity)
	}
	return j
}

func tiersJSON(r *kvtierpb.TiersResponse) TiersJSON {
	out := TiersJSON{
		DRAM: DramJSON{HighWatermark: r.GetDram().GetHighWatermark(), EvictionRatio: r.GetDram().GetEvictionRatio(), LeasePolicy: r.GetDram().GetLeasePolicy()},
		SSD: SSDJSON{OffloadMode: r.GetSsd().GetOffloadMode(), Policy: r.GetSsd().GetSsdPolicy(),
			Capacity: r.GetSsd().GetSsdCapacity(), HighWatermark: r.GetSsd().GetSsdHighWatermark()},
		Stats: []TierJSON{},
	}
	for _, t := range r.GetStats() {
		out.Stats = append(out.Stats, tierJSON(t))
	}
	return out
}

func (s *Server) getTiers(c echo.Context) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	r, err := s.ms.GetTiers(ctx, &kvtierpb.Empty{})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tiersJSON(r))
}

// DramPatch is the body of PATCH tiers/dram; only the fields given change.
type DramPatch struct {
	HighWatermark *float64 `json:"high_watermark"`
	EvictionRatio *float64 `json:"eviction_ratio"`
	LeasePolicy   *string  `json:"lease_policy"`
}

// SSDPatch is the body of PATCH tiers/ssd; only the fields given change.
// Capacity is bytes (a number) or a size string such as "512GiB".
type SSDPatch struct {
	Capacity      json.RawMessage `json:"capacity"`
	Policy        *string         `json:"policy"`
	OffloadMode   *string         `json:"offload_mode"`
	HighWatermark *float64        `json:"high_watermark"`
}

func checkFraction(name string, v *float64) error {
	if v != nil && (math.IsNaN(*v) || *v <= 0 || *v > 1) {
		return kverr.New(kverr.InvalidParams, "", "%s=%v: must be in (0, 1]", name, *v)
	}
	return nil
}

func checkChoice(name string, v *string, choices ...string) error {
	if v == nil {
		return nil
	}
	for _, c := range choices {
		if *v == c {
			return nil
		}
	}
	return kverr.New(kverr.InvalidParams, "", "%s=%q: want one of %s", name, printable(*v), strings.Join(choices, ", "))
}

func (s *Server) patchDram(c echo.Context) error {
	var p DramPatch
	if err := decodeJSON(c, &p, false); err != nil {
		return err
	}
	if p.HighWatermark == nil && p.EvictionRatio == nil && p.LeasePolicy == nil {
		return kverr.New(kverr.InvalidParams, "", "nothing to change: give high_watermark, eviction_ratio or lease_policy")
	}
	if err := checkFraction("high_watermark", p.HighWatermark); err != nil {
		return err
	}
	if err := checkFraction("eviction_ratio", p.EvictionRatio); err != nil {
		return err
	}
	if err := checkChoice("lease_policy", p.LeasePolicy, "plain", "frequency"); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	r, err := s.ms.UpdateTiers(ctx, &kvtierpb.UpdateTiersRequest{HighWatermark: p.HighWatermark, EvictionRatio: p.EvictionRatio, LeasePolicy: p.LeasePolicy})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tiersJSON(r))
}

func (s *Server) patchSSD(c echo.Context) error {
	var p SSDPatch
	if err := decodeJSON(c, &p, false); err != nil {
		return err
	}
	if p.Capacity == nil && p.Policy == nil && p.OffloadMode == nil && p.HighWatermark == nil {
		return kverr.New(kverr.InvalidParams, "", "nothing to change: give capacity, policy, offload_mode or high_watermark")
	}
	req := &kvtierpb.UpdateTiersRequest{SsdPolicy: p.Policy, OffloadMode: p.OffloadMode, SsdHighWatermark: p.HighWatermark}
	if p.Capacity != nil {
		n, err := parseCapacity(p.Capacity)
		if err != nil {
			return err
		}
		req.SsdCapacity = &n
	}
	if err := checkFraction("high_watermark", p.HighWatermark); err != nil {
		return err
	}
	if err := checkChoice("policy", p.Policy, "fifo", "lru"); err != nil {
		return err
	}
	if err := checkChoice("offload_mode", p.OffloadMode, "off", "immediate", "on-evict"); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	r, err := s.ms.UpdateTiers(ctx, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tiersJSON(r))
}

// parseCapacity accepts a JSON number of bytes or a size string.
func parseCapacity(raw json.RawMessage) (uint64, error) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		v, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil || v == 0 {
			return 0, kverr.New(kverr.InvalidParams, "", "capacity=%s: want a positive whole number of bytes", n)
		}
		return v, nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return 0, kverr.New(kverr.InvalidParams, "", "capacity: want bytes (number) or a size such as \"512GiB\"")
	}
	v, err := ParseSize(str)
	if err != nil {
		return 0, err
	}
	if v == 0 {
		return 0, kverr.New(kverr.InvalidParams, "", "capacity must be positive")
	}
	return v, nil
}

var sizeUnits = []struct {
	suffix string
	mult   uint64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// ParseSize parses "123", "64KiB", "1.5GiB", "10GB" (binary units for
// KiB/MiB/GiB/TiB and bare K/M/G/T, decimal for KB/MB/GB/TB).
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) || f*float64(mult) >= math.MaxUint64/2 {
		return 0, kverr.New(kverr.InvalidParams, "", "bad size %q: want e.g. 1073741824, 512MiB or 2TiB", printable(s))
	}
	return uint64(f * float64(mult)), nil
}

// ClientJSON is one client.
type ClientJSON struct {
	ID            string     `json:"id"`
	Endpoint      string     `json:"endpoint,omitempty"`
	Segments      []string   `json:"segments"`
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
	SinceSeconds  float64    `json:"seconds_since_heartbeat"`
	State         string     `json:"state"` // live | grace | gone
	Disk          *DiskJSON  `json:"disk,omitempty"`
	NVMeAddr      string     `json:"nvme_addr,omitempty"` // NVMe/TCP listener it reports (details: GET nvme)
	// Problems say why it is not healthy (suspect, left, gone, or what it
	// reports itself, e.g. a listener down); absent when healthy.
	Problems []string `json:"problems,omitempty"`
	// Storage: it serves storage (an appliance or storage node), as
	// opposed to a pure caller.
	Storage bool `json:"storage"`
}

// DiskJSON is an appliance's SSD tier.
type DiskJSON struct {
	Capacity           uint64 `json:"capacity"`
	Used               uint64 `json:"used"`
	Buckets            uint64 `json:"buckets"`
	Objects            uint64 `json:"objects"`
	OffloadQueue       uint64 `json:"offload_queue"`
	EvictedBuckets     uint64 `json:"evicted_buckets"`
	BytesWritten       uint64 `json:"bytes_written"`
	BytesRead          uint64 `json:"bytes_read"`
	QuarantinedBuckets uint64 `json:"quarantined_buckets"`
	IndexLoaded        bool   `json:"index_loaded"`
	OffloadSkipped     uint64 `json:"offload_skipped"`
	OffloadFailed      uint64 `json:"offload_failed"`
}

func clientState(s kvtierpb.ClientState) string {
	switch s {
	case kvtierpb.ClientState_LIVE:
		return "live"
	case kvtierpb.ClientState_CLIENT_GRACE:
		return "grace"
	case kvtierpb.ClientState_GONE:
		return "gone"
	}
	return "unknown"
}

func (s *Server) listClients(c echo.Context) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	resp, err := s.ms.ListClients(ctx, &kvtierpb.Empty{})
	if err != nil {
		return err
	}
	now := s.clk.Now()
	out := make([]ClientJSON, 0, len(resp.GetClients()))
	for _, ci := range resp.GetClients() {
		j := ClientJSON{ID: ci.GetClientId(), Endpoint: ci.GetEndpoint(), Segments: append([]string{}, ci.GetSegments()...),
			LastHeartbeat: msTime(ci.GetLastHeartbeatMs()), State: clientState(ci.GetState()),
			Problems: ci.GetProblems(), Storage: ci.GetStorage()}
		if j.LastHeartbeat != nil {
			j.SinceSeconds = math.Max(0, now.Sub(*j.LastHeartbeat).Seconds())
		}
		j.NVMeAddr = ci.GetNvme().GetAddr()
		if d := ci.GetDisk(); d != nil {
			j.Disk = &DiskJSON{Capacity: d.GetCapacity(), Used: d.GetUsed(), Buckets: d.GetBuckets(), Objects: d.GetObjects(),
				OffloadQueue: d.GetOffloadQueue(), EvictedBuckets: d.GetEvictedBuckets(), BytesWritten: d.GetBytesWritten(),
				BytesRead: d.GetBytesRead(), QuarantinedBuckets: d.GetQuarantinedBuckets(), IndexLoaded: d.GetIndexLoaded(),
				OffloadSkipped: d.GetOffloadSkipped(), OffloadFailed: d.GetOffloadFailed()}
		}
		out = append(out, j)
	}
	return c.JSON(http.StatusOK, map[string]any{"clients": out})
}

func (s *Server) getConfig(c echo.Context) error {
	if s.cfg.EffectiveConfig == nil {
		return c.JSON(http.StatusOK, map[string]any{})
	}
	v := s.cfg.EffectiveConfig()
	if _, err := json.Marshal(v); err != nil {
		return kverr.New(kverr.InternalError, "", "effective config is not JSON: %v", err)
	}
	return c.JSON(http.StatusOK, v)
}

// escapeSegment is the path segment naming a segment in segments/{name}.
func escapeSegment(name string) string { return url.PathEscape(name) }
