// Package rest owns kvtier's operator HTTP surface: the JSON REST API under
// /api/v1/ (echo), its OpenAPI 3 document at /api/v1/openapi.json, server-sent
// events at /api/v1/events, Prometheus at /metrics and the embedded web UI
// (package webui) at /.
//
// # Contract
//
// A Server translates HTTP to calls on a kvtierpb.MasterServer made in-process
// (the control plane) and on a DataPlane (object bytes for GET .../data and
// PUT). It keeps no cluster state of its own except the previous Stats sample,
// used to turn the master's counters into per-second rates for GET cluster.
// Every refusal is a JSON body
//
//	{"code":"OBJECT_NOT_FOUND","message":"...","status":404}
//
// whose code is a kverr code name and whose status comes from the one kverr
// table (Code.HTTP). Bad input is refused before anything is called, so a
// refused request changes nothing. When Config.Token is set, every mutating
// request (POST, PUT, PATCH, DELETE) must carry "Authorization: Bearer TOKEN";
// the token is compared in constant time. Reads stay open.
//
// # Paths and methods
//
// Only /api/v1/..., /metrics and the web UI's own paths (/ and its embedded
// files; webui.Serves) exist: any other path (/healthz, /version,
// /debug/pprof, Mooncake's /get_all_segments) is a 404 with the JSON error
// body, never the UI's HTML. HEAD is answered wherever GET is (routed as GET,
// body dropped; the event stream answers its headers only). Operator
// endpoints beyond the data API: GET version (build), GET system/doctor (the
// host checks of package doctor), POST appliances/{name}/drain and /undrain
// (every segment of one appliance; undrain needs the master's Undrainer
// capability).
// GET ready answers 200 with "degraded": true and "reasons" (one per
// appliance) while an appliance is suspect, has left or reports a problem:
// the cluster still serves from the others, so it stays ready.
// GET objects/{key}/data streams when the DataPlane is an ObjectStreamer:
// StreamChunk (1 MiB) at a time, each chunk written under
// Config.DataWriteTimeout, the CRC32C computed over the chunks. The last
// chunk is written only once the checksum matched; on a mismatch or a read
// error after the status was sent the connection is aborted, so the client
// sees a body shorter than Content-Length, never wrong bytes with a clean
// end. X-Kvtier-Crc32c carries the object's checksum.
//
// # Key encoding in URLs
//
// Keys are bytes. In /api/v1/objects/{key} the key is ONE path segment:
//
//   - Percent form (default): the key's bytes percent-encoded as by Go's
//     url.PathEscape / JavaScript's encodeURIComponent. Any byte may be written
//     %XX; a '/' inside a key MUST be written %2F (a literal '/' ends the
//     segment), so "model/layer/7" is /api/v1/objects/model%2Flayer%2F7.
//   - Base64 form: "~b64:" followed by the key in unpadded base64url (RFC 4648
//     §5; trailing '=' padding is tolerated), for binary keys. A key whose own
//     bytes begin with "~b64:" must be sent in this form.
//
// An empty key, bad base64 after "~b64:", or a path with an unescaped '/' in
// the key position is refused with INVALID_KEY (400). Every object JSON carries
// "key" (the key as text when it is valid UTF-8), "key_b64" (base64url) and
// "key_path" (the ready-made segment for the URLs above). A listing's
// "next_cursor" is opaque (base64url of the last key returned); pass it back
// unchanged as ?cursor=. The optional ?prefix= is percent-decoded like any
// query value, so it too may hold any bytes. ?tenant= selects the tenant
// (default "default").
//
// # Events
//
// GET /api/v1/events is a text/event-stream. Each master event is sent as
//
//	event: <kind>
//	data: <one-line JSON of Event>
//
// with a ": keep-alive" comment every Config.KeepAlive (default 15 s). The
// stream ends when the client goes away or the master's stream ends.
//
// Importers: cmd/kvtier and tests. rest imports the generated API, kverr,
// clock, metrics, doctor, buildinfo and webui; never a mechanism package.
package rest
