package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/kverr"
)

// Exit codes. Scripts branch on these, so they are part of the public
// surface (README "Exit codes"): never renumber one.
const (
	exitOK          = 0
	exitNotFound    = 1  // the object, segment or appliance is absent (exist: not stored)
	exitUsage       = 2  // bad flag, bad argument, invalid parameter
	exitUnavailable = 3  // master or appliance unreachable, not leader, not ready, timed out
	exitRefused     = 4  // refused by policy: leased, already exists, wrong owner, lease expired
	exitNoSpace     = 5  // no space, quota or object count exhausted (back off and retry)
	exitAuth        = 6  // missing or wrong credential
	exitData        = 7  // checksum mismatch, SSD read/write failure
	exitHostCheck   = 8  // kvtier doctor: at least one check failed
	exitInternal    = 10 // anything else
)

// exitCodes is the one table from kvtier error codes to exit codes.
var exitCodes = map[kverr.Code]int{
	kverr.OK:                         exitOK,
	kverr.ObjectNotFound:             exitNotFound,
	kverr.SegmentNotFound:            exitNotFound,
	kverr.ClientNotFound:             exitNotFound,
	kverr.InvalidParams:              exitUsage,
	kverr.InvalidKey:                 exitUsage,
	kverr.PayloadTooLarge:            exitUsage,
	kverr.RPCFail:                    exitUnavailable,
	kverr.TransferFail:               exitUnavailable,
	kverr.NotLeader:                  exitUnavailable,
	kverr.UnavailableInCurrentStatus: exitUnavailable,
	kverr.ReplicaIsNotReady:          exitUnavailable,
	kverr.ObjectHasLease:             exitRefused,
	kverr.ObjectAlreadyExists:        exitRefused,
	kverr.SegmentAlreadyExists:       exitRefused,
	kverr.IllegalClient:              exitRefused,
	kverr.LeaseExpired:               exitRefused,
	kverr.NoAvailableHandle:          exitNoSpace,
	kverr.QuotaExceeded:              exitNoSpace,
	kverr.ObjectCountExceeded:        exitNoSpace,
	kverr.Unauthorized:               exitAuth,
	kverr.Unauthenticated:            exitAuth,
	kverr.PermissionDenied:           exitAuth,
	kverr.ChecksumMismatch:           exitData,
	kverr.FileReadFail:               exitData,
	kverr.FileWriteFail:              exitData,
	kverr.InternalError:              exitInternal,
}

// exitError carries a specific exit status (exist: 1 when absent; doctor: 8
// when a check failed). A nil err prints nothing.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return fmt.Sprintf("exit %d: %v", e.code, e.err) }
func (e exitError) Unwrap() error { return e.err }

// usageError marks a bad command line (flag, argument, setting).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCode maps any error a command returned to its exit status.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ex exitError
	if errors.As(err, &ex) {
		return ex.code
	}
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	var ke *kverr.Error
	if errors.As(err, &ke) {
		if c, ok := exitCodes[ke.Code]; ok {
			return c
		}
		return exitInternal
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return exitUnavailable
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return exitUsage // a FILE argument that cannot be read or written
	case strings.HasPrefix(err.Error(), "unknown command "):
		// cobra returns its own "unknown command" error untyped.
		return exitUsage
	}
	if c := kverr.CodeOf(kverr.FromGRPC(err)); c != kverr.InternalError {
		if x, ok := exitCodes[c]; ok {
			return x
		}
	}
	return exitInternal
}

// markUsageErrors makes every argument-count and flag-parsing error of the
// command tree a usageError, so they exit 2 whatever their text. A group
// of verbs (tiers, config, nvme) given an unknown verb says so: cobra
// prints such a group's help and exits 0, so a script's typo
// (`kvtier tiers sett ...`) went unnoticed.
func markUsageErrors(c *cobra.Command) {
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
		c.RunE = func(cmd *cobra.Command, a []string) error {
			if len(a) > 0 {
				return usageError{fmt.Errorf("unknown command %q for %q (its commands: %s --help)", a[0], cmd.CommandPath(), cmd.CommandPath())}
			}
			return cmd.Help()
		}
	}
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markUsageErrors(sub)
	}
}
