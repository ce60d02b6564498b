// Package progress draws a one-line progress bar on a terminal and nothing
// anywhere else: a Bar whose writer is not a terminal (a pipe, a file, a
// bytes.Buffer, nil) is silent, so --json output and logs stay clean.
// Redraws are rate-limited (10 per second) and use '\r' only.
//
// Importers: bench, replay.
package progress
