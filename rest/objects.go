package rest

import (
	"cmp"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	maxReplicas      = 64 // when Config.MaxReplicas is 0
)

// ReplicaJSON is one replica of an object.
type ReplicaJSON struct {
	Type     string `json:"type"`  // MEMORY | NOF | LOCAL_DISK
	State    string `json:"state"` // PROCESSING | COMPLETE | FAILED | REMOVED
	Segment  string `json:"segment,omitempty"`
	Node     string `json:"node,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Offset   uint64 `json:"offset"`
	Length   uint64 `json:"length"`
	Bucket   uint64 `json:"bucket,omitempty"`
	NQN      string `json:"nqn,omitempty"`
	NSID     uint32 `json:"nsid,omitempty"`
	Target   string `json:"target_addr,omitempty"`
	// Unavailable: its node is down (suspect or left); readers are not
	// sent there until it returns.
	Unavailable bool `json:"unavailable,omitempty"`
}

// ObjectJSON is an object's metadata.
type ObjectJSON struct {
	Key        string        `json:"key"`
	KeyB64     string        `json:"key_b64"`
	KeyPath    string        `json:"key_path"`
	Tenant     string        `json:"tenant"`
	Size       uint64        `json:"size"`
	CRC32C     *uint32       `json:"crc32c,omitempty"`
	Writer     string        `json:"writer,omitempty"`
	Created    *time.Time    `json:"created,omitempty"`
	Lease      LeaseJSON     `json:"lease"`
	SoftPin    bool          `json:"soft_pin"`
	SoftPinTil *time.Time    `json:"soft_pin_until,omitempty"`
	HardPin    bool          `json:"hard_pin"`
	ReadCount  uint64        `json:"read_count"`
	Complete   bool          `json:"complete"`
	Tiers      []string      `json:"tiers"`
	Replicas   []ReplicaJSON `json:"replicas"`
}

// LeaseJSON says whether an object is leased (cannot be evicted or removed
// without force) and until when.
type LeaseJSON struct {
	Active   bool       `json:"active"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

// ObjectListJSON is one page of a listing.
type ObjectListJSON struct {
	Objects    []ObjectJSON `json:"objects"`
	NextCursor string       `json:"next_cursor"`
}

func msTime(ms int64) *time.Time {
	if ms <= 0 {
		return nil
	}
	t := time.UnixMilli(ms).UTC()
	return &t
}

func replicaJSON(r *kvtierpb.Replica) ReplicaJSON {
	return ReplicaJSON{
		Type: r.GetType().String(), State: r.GetState().String(), Segment: r.GetSegment(),
		Node: r.GetNode(), Endpoint: r.GetEndpoint(), Offset: r.GetOffset(), Length: r.GetLength(),
		Bucket: r.GetBucket(), NQN: r.GetNqn(), NSID: r.GetNsid(), Target: r.GetTargetAddr(),
		Unavailable: r.GetUnavailable(),
	}
}

func tierOf(t kvtierpb.ReplicaType) string {
	switch t {
	case kvtierpb.ReplicaType_MEMORY:
		return "memory"
	case kvtierpb.ReplicaType_NOF:
		return "nof"
	case kvtierpb.ReplicaType_LOCAL_DISK:
		return "disk"
	}
	return "unknown"
}

func (s *Server) objectJSON(o *kvtierpb.ObjectInfo) ObjectJSON {
	now := s.clk.Now()
	j := ObjectJSON{
		Key: keyText(o.GetKey()), KeyB64: base64.RawURLEncoding.EncodeToString(o.GetKey()),
		KeyPath: EncodeKeyPath(o.GetKey()), Tenant: o.GetTenant(), Size: o.GetSize(),
		Writer: o.GetWriter(), Created: msTime(o.GetCreatedMs()),
		SoftPin: o.GetSoftPin(), SoftPinTil: msTime(o.GetSoftPinDeadlineMs()), HardPin: o.GetHardPin(),
		ReadCount: o.GetReadCount(), Replicas: []ReplicaJSON{}, Tiers: []string{},
	}
	if o.GetHasChecksum() {
		c := o.GetCrc32C()
		j.CRC32C = &c
	}
	if d := o.GetLeaseDeadlineMs(); d > 0 {
		j.Lease = LeaseJSON{Active: now.UnixMilli() < d, Deadline: msTime(d)}
	}
	seen := map[string]bool{}
	for _, r := range o.GetReplicas() {
		j.Replicas = append(j.Replicas, replicaJSON(r))
		if r.GetState() == kvtierpb.ReplicaState_COMPLETE {
			j.Complete = true
			if t := tierOf(r.GetType()); !seen[t] {
				seen[t] = true
				j.Tiers = append(j.Tiers, t)
			}
		}
	}
	return j
}

// tenantOf returns the ?tenant= value, default "default".
func tenantOf(c echo.Context) (string, error) {
	t := c.QueryParam("tenant")
	if t == "" {
		return "default", nil
	}
	if len(t) > 128 || strings.ContainsAny(t, "\x00\n\r") {
		return "", kverr.New(kverr.InvalidParams, "", "bad tenant %q", printable(t))
	}
	return t, nil
}

// keyParam decodes the {key} path segment (see the package doc).
func keyParam(c echo.Context) ([]byte, error) {
	raw := c.Param("key")
	seg := raw
	if c.Request().URL.RawPath != "" {
		// echo routed on the escaped path, so the parameter is still escaped.
		var err error
		if seg, err = url.PathUnescape(raw); err != nil {
			return nil, kverr.New(kverr.InvalidKey, "", "key %q: bad percent-encoding: %v", printable(raw), err)
		}
	}
	return decodeKeySegment(seg)
}

// segmentParam decodes the {name} path segment of a segment route.
func segmentParam(c echo.Context) (string, error) {
	raw := c.Param("name")
	name := raw
	if c.Request().URL.RawPath != "" {
		var err error
		if name, err = url.PathUnescape(raw); err != nil {
			return "", kverr.New(kverr.InvalidParams, "", "segment name %q: bad percent-encoding", printable(raw))
		}
	}
	if name == "" {
		return "", kverr.New(kverr.InvalidParams, "", "empty segment name")
	}
	return name, nil
}

func boolParam(c echo.Context, name string) (bool, error) {
	v := c.QueryParam(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, kverr.New(kverr.InvalidParams, "", "%s=%q: want true or false", name, printable(v))
	}
	return b, nil
}

func (s *Server) listObjects(c echo.Context) error {
	tenant, err := tenantOf(c)
	if err != nil {
		return err
	}
	limit := DefaultListLimit
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return kverr.New(kverr.InvalidParams, "", "limit=%q: want an integer from 1 to %d", printable(v), MaxListLimit)
		}
		limit = n
	}
	cursor, err := decodeCursor(c.QueryParam("cursor"))
	if err != nil {
		return err
	}
	all, err := boolParam(c, "all_tenants")
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	resp, err := s.ms.ListObjects(ctx, &kvtierpb.ListObjectsRequest{
		Tenant: tenant, Prefix: []byte(c.QueryParam("prefix")), Cursor: cursor,
		Limit: uint32(limit), AllTenants: all,
	})
	if err != nil {
		return err
	}
	out := ObjectListJSON{Objects: make([]ObjectJSON, 0, len(resp.GetObjects())), NextCursor: encodeCursor(resp.GetNextCursor())}
	for _, o := range resp.GetObjects() {
		out.Objects = append(out.Objects, s.objectJSON(o))
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) getObject(c echo.Context) error {
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	tenant, err := tenantOf(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	o, err := s.ms.GetObject(ctx, &kvtierpb.KeyRequest{Tenant: tenant, Key: key})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.objectJSON(o))
}

func (s *Server) needDataPlane() error {
	if s.dp == nil {
		return kverr.New(kverr.UnavailableInCurrentStatus, "", "this server has no data plane: object bytes are not served here")
	}
	return nil
}

func (s *Server) getObjectData(c echo.Context) error {
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	tenant, err := tenantOf(c)
	if err != nil {
		return err
	}
	if err := s.needDataPlane(); err != nil {
		return err
	}
	if sp, ok := s.dp.(ObjectStreamer); ok {
		return s.streamObject(c, sp, tenant, string(key))
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	v, err := s.dp.Get(ctx, tenant, string(key))
	if err != nil {
		return err
	}
	s.met.AddTransferBytes("rest_get", len(v))
	return c.Blob(http.StatusOK, "application/octet-stream", v)
}

func (s *Server) putObject(c echo.Context) error {
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	tenant, err := tenantOf(c)
	if err != nil {
		return err
	}
	opts := PutOptions{Tenant: tenant, Replicas: 1, PreferredSegment: c.QueryParam("preferred_segment")}
	if v := c.QueryParam("replicas"); v != "" {
		most := cmp.Or(s.cfg.MaxReplicas, maxReplicas)
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > most {
			return kverr.New(kverr.InvalidParams, "", "replicas=%q: want an integer from 1 to %d", printable(v), most)
		}
		opts.Replicas = n
	}
	if opts.SoftPin, err = boolParam(c, "soft_pin"); err != nil {
		return err
	}
	if opts.HardPin, err = boolParam(c, "hard_pin"); err != nil {
		return err
	}
	if err := s.needDataPlane(); err != nil {
		return err
	}
	r := c.Request()
	if r.ContentLength > s.cfg.MaxPutBytes {
		return kverr.New(kverr.PayloadTooLarge, "", "body of %d bytes is over the limit of %d bytes", r.ContentLength, s.cfg.MaxPutBytes)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxPutBytes+1))
	if err != nil {
		return kverr.New(kverr.InvalidParams, "", "reading body: %v", err)
	}
	if int64(len(body)) > s.cfg.MaxPutBytes {
		return kverr.New(kverr.PayloadTooLarge, "", "body is over the limit of %d bytes", s.cfg.MaxPutBytes)
	}
	if len(body) == 0 {
		return kverr.New(kverr.InvalidParams, "", "PUT needs a body: the object's value (at least one byte)")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if err := s.dp.Put(ctx, string(key), body, opts); err != nil {
		return err
	}
	s.met.AddTransferBytes("rest_put", len(body))
	o, err := s.ms.GetObject(ctx, &kvtierpb.KeyRequest{Tenant: tenant, Key: key})
	if err != nil {
		// Stored, but the metadata read failed: still a success.
		return c.JSON(http.StatusCreated, map[string]any{"key_path": EncodeKeyPath(key), "size": len(body)})
	}
	return c.JSON(http.StatusCreated, s.objectJSON(o))
}

func (s *Server) deleteObject(c echo.Context) error {
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	tenant, err := tenantOf(c)
	if err != nil {
		return err
	}
	force, err := boolParam(c, "force")
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.ms.Remove(ctx, &kvtierpb.KeyRequest{Tenant: tenant, Key: key, Force: force}); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
