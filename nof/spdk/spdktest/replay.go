package spdktest

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/kvtier/kvtier/nof/spdk"
)

// vectors is a verbatim copy of shared/nvme-tcp-vectors/rpc/ (SPDK v26.05
// lab recordings, 2026-11-29).
//
//go:embed vectors
var vectors embed.FS

// Exchange is one recorded JSON-RPC exchange.
type Exchange struct {
	Name     string // e.g. "05-bdev_malloc_create"
	Request  []byte // the exact bytes sent (possibly several values)
	Response []byte // the exact bytes received; empty when nothing came back
}

// Recordings returns every recorded exchange, in file order.
func Recordings() ([]Exchange, error) {
	names, err := fs.Glob(vectors, "vectors/*.request.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]Exchange, 0, len(names))
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "vectors/"), ".request.json")
		req, err := vectors.ReadFile(n)
		if err != nil {
			return nil, err
		}
		resp, err := vectors.ReadFile("vectors/" + base + ".response.raw")
		if err != nil {
			return nil, err
		}
		out = append(out, Exchange{Name: base, Request: req, Response: resp})
	}
	return out, nil
}

// Recording returns the exchange with the given name.
func Recording(name string) (Exchange, error) {
	all, err := Recordings()
	if err != nil {
		return Exchange{}, err
	}
	for _, e := range all {
		if e.Name == name {
			return e, nil
		}
	}
	return Exchange{}, fmt.Errorf("spdktest: no recording %q", name)
}

// Replay answers requests with recorded replies. A request matches a
// recording when its method and params are semantically equal to the
// recorded request's (object member order and whitespace do not matter).
// Recordings with the same method and params are replayed in file order;
// the last one repeats (so nvmf_create_transport {"trtype":"TCP"} succeeds
// once, then fails with the recorded "already exists").
type Replay struct {
	mu sync.Mutex
	// guarded by mu:
	queues map[string][]recorded
}

type recorded struct {
	name   string
	result json.RawMessage
	err    *spdk.RPCError
}

// NewReplay indexes every exchange whose request is one object with a method
// and a numeric or string id, answered by one reply object.
func NewReplay(ex []Exchange) (*Replay, error) {
	r := &Replay{queues: map[string][]recorded{}}
	for _, e := range ex {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if !json.Valid(e.Request) || json.Unmarshal(e.Request, &req) != nil ||
			req.Method == "" || len(req.ID) == 0 || string(req.ID) == "null" {
			continue
		}
		replies, err := spdk.DecodeReplies(e.Response)
		if err != nil || len(replies) != 1 || !bytes.Equal(replies[0].RawID, req.ID) {
			continue
		}
		key, err := Key(req.Method, req.Params)
		if err != nil {
			return nil, fmt.Errorf("spdktest: %s: %w", e.Name, err)
		}
		rec := recorded{name: e.Name, result: replies[0].Result, err: replies[0].Err}
		r.queues[key] = append(r.queues[key], rec)
	}
	return r, nil
}

// Handle is the HandlerFunc of the replay.
func (r *Replay) Handle(method string, params json.RawMessage) (json.RawMessage, *spdk.RPCError) {
	key, err := Key(method, params)
	if err != nil {
		return nil, &spdk.RPCError{Code: spdk.CodeInvalidParams, Message: "spdktest: " + err.Error()}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[key]
	if len(q) == 0 {
		return nil, &spdk.RPCError{Code: spdk.CodeInvalidParams,
			Message: fmt.Sprintf("spdktest: no recorded exchange for %s %s", method, params)}
	}
	rec := q[0]
	if len(q) > 1 {
		r.queues[key] = q[1:]
	}
	if rec.err != nil {
		e := *rec.err
		return nil, &e
	}
	return rec.result, nil
}

// Key is the semantic identity of a request: method plus canonical params
// (absent and null params are the same).
func Key(method string, params json.RawMessage) (string, error) {
	c, err := Canonical(params)
	if err != nil {
		return "", err
	}
	return method + "\x00" + string(c), nil
}

// Canonical re-encodes a JSON value with sorted object keys and no
// whitespace; nil or "null" becomes empty.
func Canonical(v json.RawMessage) ([]byte, error) {
	t := bytes.TrimSpace(v)
	if len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	return json.Marshal(x)
}
