// Package tests holds kvtier's multi-process tests: a master, appliances and
// clients run as separate OS processes of the real kvtier binary on loopback,
// and faults are caused for real (SIGKILL, SIGTERM, restarts).
package tests
