// Package webui owns kvtier's operator web UI: plain HTML, CSS and JavaScript
// embedded in the binary with go:embed, with hand-drawn charts (canvas) and no
// external fetch at run time (no CDN, no web fonts).
//
// # Contract
//
// Handler serves the assets at / (index.html for /). Pages are addressed by
// URL fragment (#host), so Serves reports / and the embedded files as the
// UI's only paths; rest answers every other path 404. The UI talks only to the REST API of
// package rest under /api/v1/ (polling and the /api/v1/events server-sent
// events). When the API refuses a mutating request with UNAUTHORIZED, the UI
// asks once for the bearer token, keeps it in the browser's sessionStorage
// and sends it as "Authorization: Bearer TOKEN" on every later request.
//
// Importers: rest (mounts Handler at /). webui imports nothing of kvtier; its
// browser tests (package webui_test) drive a real master through rest in
// headless Chromium.
package webui
