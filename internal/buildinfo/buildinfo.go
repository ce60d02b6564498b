// Package buildinfo owns what the kvtier binary says about its own build:
// version, commit, Go version and build tags. The version and commit are set
// at link time (make build passes -ldflags "-X ...Version=... -X ...Commit=...");
// without them they fall back to what runtime/debug.ReadBuildInfo recorded
// (module version, vcs.revision when the build stamped VCS data).
//
// It is a leaf: anything may import it (cmd/kvtier prints it, metrics exports
// it as kvtier_build_info).
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the linker: go build -ldflags "-X github.com/kvtier/kvtier/internal/buildinfo.Version=v1.2.3".
// Link-time strings are the one mutable package state here: they are written
// only by the linker, never at run time.
var (
	Version = ""
	Commit  = ""
)

// Info describes one build.
type Info struct {
	Version   string   `json:"version"`
	Commit    string   `json:"commit"`
	GoVersion string   `json:"go_version"`
	BuildTags []string `json:"build_tags"`
	Platform  string   `json:"platform"`
	Modified  bool     `json:"modified,omitempty"`
}

// Get returns the build's description; fields nobody recorded read "unknown"
// (the version reads "devel").
func Get() Info {
	in := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, BuildTags: []string{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			case "-tags":
				for _, t := range strings.Split(s.Value, ",") {
					if t = strings.TrimSpace(t); t != "" {
						in.BuildTags = append(in.BuildTags, t)
					}
				}
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	return in
}

// String is the one-line form `kvtier --version` prints.
func (i Info) String() string {
	tags := "none"
	if len(i.BuildTags) > 0 {
		tags = strings.Join(i.BuildTags, ",")
	}
	commit := i.Commit
	if i.Modified {
		commit += "+dirty"
	}
	return "kvtier " + i.Version + " (commit " + commit + ", " + i.GoVersion + ", " + i.Platform + ", tags " + tags + ")"
}
