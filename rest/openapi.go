package rest

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/kvtier/kvtier/internal/auth"
)

// apiOp documents one endpoint. The table below is written by hand, apart
// from the routes in Server.routes; a test checks that the two agree.
type apiOp struct {
	method, path, summary, description string
	params                             []apiParam
	body                               map[string]any // request body, nil if none
	ok                                 int
	okSchema                           map[string]any
	okType                             string // content type of the answer; "" is application/json
	errors                             []int
	mutating                           bool
}

type apiParam struct{ name, in, typ, desc string }

const keyEncodingDoc = "Keys are bytes. {key} is one path segment: either the key percent-encoded " +
	"(as by encodeURIComponent / url.PathEscape; every '/' in the key MUST be %2F, any byte may be %XX), " +
	"or \"~b64:\" followed by the key in unpadded base64url (for binary keys, and for keys that themselves " +
	"start with \"~b64:\"). Object JSON carries key_path, the ready-made segment."

var (
	pTenant    = apiParam{"tenant", "query", "string", "Tenant; default \"default\"."}
	pKey       = apiParam{"key", "path", "string", keyEncodingDoc}
	pSeg       = apiParam{"name", "path", "string", "Segment name, percent-encoded (name_path in the listing)."}
	pAppliance = apiParam{"name", "path", "string", "Appliance name (its client id in GET clients), percent-encoded."}
)

func obj(props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props}
}
func ref(name string) map[string]any          { return map[string]any{"$ref": "#/components/schemas/" + name} }
func str() map[string]any                     { return map[string]any{"type": "string"} }
func num() map[string]any                     { return map[string]any{"type": "number"} }
func integer() map[string]any                 { return map[string]any{"type": "integer"} }
func boolean() map[string]any                 { return map[string]any{"type": "boolean"} }
func arr(items map[string]any) map[string]any { return map[string]any{"type": "array", "items": items} }

var apiOps = []apiOp{
	{method: "GET", path: "/api/v1/health", summary: "Liveness", ok: 200, okSchema: obj(map[string]any{"status": str(), "time": str()})},
	{method: "GET", path: "/api/v1/ready", summary: "Readiness",
		description: "200 when this master is the leader, at least one segment is mounted and every SSD index is loaded; 503 with the reason otherwise.",
		ok:          200, okSchema: ref("Ready"), errors: []int{503}},
	{method: "GET", path: "/api/v1/cluster", summary: "Capacity, use, hit rates, rates, evictions, offloads, rejected puts",
		description: "Rates are per second over the last up-to-10 s between calls (valid=false on the first call).",
		ok:          200, okSchema: ref("Cluster")},
	{method: "GET", path: "/api/v1/segments", summary: "Mounted segments", ok: 200, okSchema: obj(map[string]any{"segments": arr(ref("Segment"))})},
	{method: "POST", path: "/api/v1/segments/{name}/drain", summary: "Drain a segment",
		description: "No new allocations; reads are served for grace_ms (1 ms to 24 h, default 30000), then the segment is unmounted. The body is optional.",
		params:      []apiParam{pSeg}, body: obj(map[string]any{"grace_ms": integer()}), ok: 202, errors: []int{400, 401, 404, 409}, mutating: true},
	{method: "DELETE", path: "/api/v1/segments/{name}", summary: "Unmount a segment at once", params: []apiParam{pSeg},
		ok: 204, errors: []int{400, 401, 404, 409}, mutating: true},
	{method: "GET", path: "/api/v1/objects", summary: "List objects",
		params: []apiParam{pTenant,
			{"prefix", "query", "string", "Only keys starting with these bytes (percent-decoded)."},
			{"limit", "query", "integer", "1 to 1000; default 100."},
			{"cursor", "query", "string", "next_cursor of the previous page, unchanged."},
			{"all_tenants", "query", "boolean", "List every tenant."}},
		ok: 200, okSchema: obj(map[string]any{"objects": arr(ref("Object")), "next_cursor": str()}), errors: []int{400}},
	{method: "GET", path: "/api/v1/objects/{key}", summary: "Object metadata: replicas, lease and pin state",
		params: []apiParam{pKey, pTenant}, ok: 200, okSchema: ref("Object"), errors: []int{400, 404}},
	{method: "GET", path: "/api/v1/objects/{key}/data", summary: "Object bytes", description: "Streamed 1 MiB at a time; X-Kvtier-Crc32c carries the checksum. The last chunk is sent only once the checksum matched: a mismatch or a failed read after the status aborts the connection (a body shorter than Content-Length).",
		params: []apiParam{pKey, pTenant}, ok: 200, okSchema: map[string]any{"type": "string", "format": "binary"}, okType: "application/octet-stream", errors: []int{400, 404, 409}},
	{method: "PUT", path: "/api/v1/objects/{key}", summary: "Store an object (body = value)",
		description: "Objects are write-once: a second PUT of the key is OBJECT_ALREADY_EXISTS (409). The body must be 1 byte to the configured maximum.",
		params: []apiParam{pKey, pTenant,
			{"replicas", "query", "integer", "1 to the master's maximum (8 by default); default 1."},
			{"soft_pin", "query", "boolean", "Evict only after unpinned objects."},
			{"hard_pin", "query", "boolean", "Never evict."},
			{"preferred_segment", "query", "string", "Place the first replica here if it fits."}},
		body: map[string]any{"type": "string", "format": "binary"}, ok: 201, okSchema: ref("Object"),
		errors: []int{400, 401, 409, 413, 507}, mutating: true},
	{method: "DELETE", path: "/api/v1/objects/{key}", summary: "Remove an object",
		params: []apiParam{pKey, pTenant, {"force", "query", "boolean", "Remove even while leased."}},
		ok:     204, errors: []int{400, 401, 404, 423}, mutating: true},
	{method: "GET", path: "/api/v1/tiers", summary: "Tier settings and figures", ok: 200, okSchema: ref("Tiers")},
	{method: "PATCH", path: "/api/v1/tiers/dram", summary: "Change DRAM settings (at once)",
		body: obj(map[string]any{"high_watermark": num(), "eviction_ratio": num(), "lease_policy": map[string]any{"type": "string", "enum": []string{"plain", "frequency"}}}),
		ok:   200, okSchema: ref("Tiers"), errors: []int{400, 401}, mutating: true},
	{method: "PATCH", path: "/api/v1/tiers/ssd", summary: "Change SSD settings (at once)",
		description: "capacity is bytes or a size string such as \"512GiB\".",
		body: obj(map[string]any{"capacity": map[string]any{"oneOf": []any{integer(), str()}}, "high_watermark": num(),
			"policy":       map[string]any{"type": "string", "enum": []string{"fifo", "lru"}},
			"offload_mode": map[string]any{"type": "string", "enum": []string{"off", "immediate", "on-evict"}}}),
		ok: 200, okSchema: ref("Tiers"), errors: []int{400, 401}, mutating: true},
	{method: "GET", path: "/api/v1/clients", summary: "Clients, their segments, last heartbeat and state (live, grace, gone)", ok: 200,
		okSchema: obj(map[string]any{"clients": arr(obj(map[string]any{"id": str(), "endpoint": str(), "segments": arr(str()),
			"last_heartbeat": str(), "seconds_since_heartbeat": num(), "state": str(), "disk": map[string]any{"type": "object"}, "nvme_addr": str(),
			"problems": arr(str()), "storage": boolean()}))})},
	{method: "GET", path: "/api/v1/nvme", summary: "NVMe/TCP targets: subsystems, namespaces with I/O counters, connected hosts",
		description: "One entry per appliance that reports a built-in NVMe/TCP target in its heartbeat, with the figures of its last heartbeat " +
			"(state tells whether it is still live). Counters are totals since the target started; sizes and byte counts are bytes. " +
			"A namespace mounted as a NOF segment names it, with the bytes the master allocated there.",
		ok: 200, okSchema: ref("NVMe")},
	{method: "GET", path: "/api/v1/config", summary: "Effective configuration", ok: 200, okSchema: map[string]any{"type": "object"}},
	{method: "GET", path: "/api/v1/system", summary: "Host figures: CPU, memory, hugepages, disks, NICs", ok: 200, okSchema: map[string]any{"type": "object"}},
	{method: "GET", path: "/api/v1/events", summary: "Server-sent events",
		description: "A text/event-stream that does not end: event names put (sampled), remove, evict, offload, bucket_delete, segment, client; each data line is one JSON Event (schema Event). A ': keep-alive' comment every 15 s. HEAD answers the headers only.",
		ok:          200, okType: "text/event-stream", okSchema: map[string]any{"type": "string", "description": "SSE frames: 'event: KIND' then 'data: {Event JSON}' then a blank line"}},
	{method: "GET", path: "/api/v1/system/doctor", summary: "Host checks (kvtier doctor): hugepages, memlock, THP, O_DIRECT, free space, I/O scheduler, NUMA, open files, clock, RDMA, NVMe",
		description: "Each check has a status (ok, warn, fail, skip), what was found, what kvtier wants and the command that fixes it. ok is false when a check failed.",
		ok:          200, okSchema: ref("Doctor")},
	{method: "GET", path: "/api/v1/version", summary: "Build: version, commit, Go version, build tags", ok: 200,
		okSchema: obj(map[string]any{"version": str(), "commit": str(), "go_version": str(), "build_tags": arr(str()), "platform": str()})},
	{method: "POST", path: "/api/v1/appliances/{name}/drain", summary: "Drain every segment of an appliance",
		description: "Each segment takes no new allocations and serves reads for grace_ms (1 ms to 24 h, default 30000), then is unmounted; heartbeats do not remount it until undrain. The body is optional.",
		params:      []apiParam{pAppliance}, body: obj(map[string]any{"grace_ms": integer()}), ok: 202, okSchema: ref("ApplianceDrain"),
		errors: []int{400, 401, 404}, mutating: true},
	{method: "POST", path: "/api/v1/appliances/{name}/undrain", summary: "Undo a drain of an appliance",
		description: "Draining segments take allocations again at once; segments the drain already unmounted are remounted by the appliance's next heartbeat.",
		params:      []apiParam{pAppliance}, ok: 200, okSchema: ref("ApplianceDrain"), errors: []int{401, 404}, mutating: true},
	{method: "GET", path: "/api/v1/openapi.json", summary: "This document", ok: 200, okSchema: map[string]any{"type": "object"}},
}

// role is the least role op needs when the master has credentials
// (RoleNone: open to all), as Server.authorizeREST decides it; a test
// checks the two agree on a running server.
func (op apiOp) role() auth.Role {
	switch {
	case op.method == "GET" && (op.path == "/api/v1/health" || op.path == "/api/v1/ready"):
		return auth.RoleNone
	case strings.HasPrefix(op.path, "/api/v1/objects"):
		return auth.RoleClient // (a forced DELETE: admin)
	case op.method == "GET" && (op.path == "/api/v1/version" || op.path == "/api/v1/openapi.json"):
		return auth.RoleClient
	case op.method == "GET":
		return auth.RoleAppliance
	}
	return auth.RoleAdmin
}

func schemas() map[string]any {
	tier := obj(map[string]any{"tier": str(), "capacity": integer(), "used": integer(), "objects": integer(), "hits": integer(),
		"misses": integer(), "used_fraction": num()})
	return map[string]any{
		"Error": obj(map[string]any{"code": map[string]any{"type": "string", "example": "OBJECT_NOT_FOUND"}, "message": str(), "status": integer()}),
		"Ready": obj(map[string]any{"ready": boolean(), "reason": str(), "mounted_segments": integer(), "leader": boolean(),
			"degraded": boolean(), "reasons": arr(str())}),
		"Tier": tier,
		"Cluster": obj(map[string]any{"time": str(), "leader": boolean(), "objects": integer(), "heap_bytes": integer(),
			"tiers": arr(ref("Tier")), "rates": map[string]any{"type": "object"}, "puts": map[string]any{"type": "object"},
			"gets": map[string]any{"type": "object"}, "evictions": map[string]any{"type": "object"},
			"offloads": map[string]any{"type": "object"}, "counters": map[string]any{"type": "object"}}),
		"Segment": obj(map[string]any{"name": str(), "name_path": str(), "type": str(), "owner": str(), "state": str(),
			"capacity": integer(), "used": integer(), "largest_free": integer(), "replicas": integer(), "drain_deadline": str()}),
		"Replica": obj(map[string]any{"type": str(), "state": str(), "segment": str(), "node": str(), "offset": integer(), "length": integer(), "bucket": integer(),
			"unavailable": boolean()}),
		"Object": obj(map[string]any{"key": str(), "key_b64": str(), "key_path": str(), "tenant": str(), "size": integer(),
			"lease": obj(map[string]any{"active": boolean(), "deadline": str()}), "soft_pin": boolean(), "hard_pin": boolean(),
			"complete": boolean(), "tiers": arr(str()), "replicas": arr(ref("Replica"))}),
		"NVMeNamespace": obj(map[string]any{"nsid": integer(), "size": integer(), "block_size": integer(), "blocks": integer(),
			"read_ops": integer(), "read_bytes": integer(), "write_ops": integer(), "write_bytes": integer(),
			"other_ops": integer(), "errors": integer(),
			"segment": obj(map[string]any{"name": str(), "name_path": str(), "state": str(), "used": integer(), "replicas": integer()})}),
		"NVMeHost": obj(map[string]any{"cntlid": integer(), "host_nqn": str(), "sub_nqn": str(), "remote_addr": str(), "io_queues": integer()}),
		"NVMe": obj(map[string]any{
			"appliances": arr(obj(map[string]any{"node": str(), "state": str(), "last_heartbeat": str(), "seconds_since_heartbeat": num(),
				"addr": str(), "subsystems": arr(obj(map[string]any{"nqn": str(), "namespaces": arr(ref("NVMeNamespace"))})),
				"hosts": arr(ref("NVMeHost"))})),
			"totals": obj(map[string]any{"appliances": integer(), "subsystems": integer(), "namespaces": integer(), "hosts": integer(),
				"capacity": integer(), "read_ops": integer(), "read_bytes": integer(), "write_ops": integer(), "write_bytes": integer(),
				"other_ops": integer(), "errors": integer()})}),
		"Doctor": obj(map[string]any{"ok": boolean(), "failed": integer(), "warned": integer(),
			"checks": arr(obj(map[string]any{"name": str(), "status": map[string]any{"type": "string", "enum": []string{"ok", "warn", "fail", "skip"}},
				"found": str(), "want": str(), "fix": str()}))}),
		"ApplianceDrain": obj(map[string]any{"appliance": str(), "state": str(), "grace_ms": integer(), "segments": arr(str())}),
		"Event":          obj(map[string]any{"time": str(), "kind": str(), "tenant": str(), "key": str(), "key_b64": str(), "segment": str(), "node": str(), "bytes": integer(), "message": str()}),
		"Tiers": obj(map[string]any{"dram": obj(map[string]any{"high_watermark": num(), "eviction_ratio": num(), "lease_policy": str()}),
			"ssd":   obj(map[string]any{"offload_mode": str(), "policy": str(), "capacity": integer(), "high_watermark": num()}),
			"stats": arr(ref("Tier"))}),
	}
}

// OpenAPI returns the OpenAPI 3 document of the API.
func OpenAPI() map[string]any {
	paths := map[string]any{}
	errResp := map[string]any{"description": "Refused", "content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}}
	unauthResp := map[string]any{"description": "UNAUTHENTICATED: no or unknown token (WWW-Authenticate: Bearer)",
		"content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}}
	deniedResp := map[string]any{"description": "PERMISSION_DENIED: the credential's role is below x-kvtier-role, or the request names another tenant than the credential's",
		"content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}}
	for _, op := range apiOps {
		item, _ := paths[op.path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[op.path] = item
		}
		o := map[string]any{"summary": op.summary, "operationId": op.method + " " + op.path}
		if op.description != "" {
			o["description"] = op.description
		}
		var params []any
		for _, p := range op.params {
			params = append(params, map[string]any{"name": p.name, "in": p.in, "required": p.in == "path",
				"description": p.desc, "schema": map[string]any{"type": p.typ}})
		}
		if params != nil {
			o["parameters"] = params
		}
		if op.body != nil {
			ct := "application/json"
			if op.body["format"] == "binary" {
				ct = "application/octet-stream"
			}
			o["requestBody"] = map[string]any{"required": ct != "application/json" || op.method == "PATCH",
				"content": map[string]any{ct: map[string]any{"schema": op.body}}}
		}
		resps := map[string]any{}
		okDesc := map[string]any{"description": http.StatusText(op.ok)}
		if op.okSchema != nil {
			ct := op.okType
			if ct == "" {
				ct = "application/json"
			}
			okDesc["content"] = map[string]any{ct: map[string]any{"schema": op.okSchema}}
		}
		resps[strconv.Itoa(op.ok)] = okDesc
		for _, e := range op.errors {
			resps[strconv.Itoa(e)] = errResp
		}
		resps["default"] = errResp
		o["responses"] = resps
		if role := op.role(); role != auth.RoleNone {
			// With credentials every route but health and ready needs a
			// token (with only --http-token, the mutating ones).
			o["security"] = []any{map[string]any{"bearer": []string{}}}
			o["x-kvtier-role"] = role.String()
			resps["401"] = unauthResp
			resps["403"] = deniedResp
		}
		item[strings.ToLower(op.method)] = o
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{"title": "kvtier operator API", "version": "1",
			"description": "Control and inspect a kvtier cluster. Errors are {code, message, status}. " + keyEncodingDoc +
				" When a token is configured, mutating requests need Authorization: Bearer TOKEN." +
				" With credentials (--credentials) every operation marked with security needs a token (or a verified client certificate)" +
				" whose role is at least the operation's x-kvtier-role (client < appliance < admin; a forced DELETE of an object is admin's;" +
				" a client credential confined to a tenant has ?tenant= set to it and may name no other): 401 UNAUTHENTICATED without one" +
				" or with an unknown one, 403 PERMISSION_DENIED below the role. Only health and ready stay open." +
				" HEAD is answered wherever GET is. Paths outside /api/v1/, /metrics and the web UI's (/, /index.html, /app.js, /app.css) are 404."},
		"servers": []any{map[string]any{"url": "/"}},
		"paths":   paths,
		"components": map[string]any{"schemas": schemas(),
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
}

func (s *Server) openapi(c echo.Context) error { return c.JSON(http.StatusOK, OpenAPI()) }
