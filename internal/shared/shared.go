// Package shared finds the project's shared reference material (traces,
// NVMe/TCP captures, SPDK transcripts) for tests: the folder named shared that
// sits beside the checkout (as on developer machines and in CI), or the one
// named by KVTIER_SHARED. Only tests import it.
package shared

import (
	"os"
	"path/filepath"
)

// Dir returns the shared folder, or "" when none is found.
func Dir() string {
	if d := os.Getenv("KVTIER_SHARED"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := wd; ; d = filepath.Dir(d) {
		cand := filepath.Join(d, "shared")
		if st, err := os.Stat(filepath.Join(cand, "DESIGN.md")); err == nil && !st.IsDir() {
			return cand
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if _, err := os.Stat("/work/shared/DESIGN.md"); err == nil {
		return "/work/shared"
	}
	return ""
}

// Path joins elem onto Dir ("" when there is no shared folder).
func Path(elem ...string) string {
	d := Dir()
	if d == "" {
		return ""
	}
	return filepath.Join(append([]string{d}, elem...)...)
}
