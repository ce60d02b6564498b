package rest

import (
	"encoding/base64"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/kvtier/kvtier/kverr"
)

// b64Prefix marks a key path segment written in base64url.
const b64Prefix = "~b64:"

// decodeKeySegment turns a URL path segment that has already been
// percent-decoded into key bytes (see the package doc).
func decodeKeySegment(seg string) ([]byte, error) {
	if strings.HasPrefix(seg, b64Prefix) {
		enc := strings.TrimRight(seg[len(b64Prefix):], "=")
		k, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			return nil, kverr.New(kverr.InvalidKey, "", "key %q: bad base64url after %q: %v", seg, b64Prefix, err)
		}
		if len(k) == 0 {
			return nil, kverr.New(kverr.InvalidKey, "", "empty key after %q", b64Prefix)
		}
		return k, nil
	}
	if seg == "" {
		return nil, kverr.New(kverr.InvalidKey, "", "empty key")
	}
	return []byte(seg), nil
}

// EncodeKeyPath returns the path segment that names key in
// /api/v1/objects/{key}: the percent form when the key is valid UTF-8 and does
// not itself start with "~b64:", the base64 form otherwise.
func EncodeKeyPath(key []byte) string {
	s := string(key)
	if utf8.ValidString(s) && !strings.HasPrefix(s, b64Prefix) && s != "" && !hasControl(s) {
		return url.PathEscape(s)
	}
	return b64Prefix + base64.RawURLEncoding.EncodeToString(key)
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

// keyText is the key as display text, or "" when it is not valid UTF-8.
func keyText(key []byte) string {
	if utf8.Valid(key) {
		return string(key)
	}
	return ""
}

// encodeCursor and decodeCursor make the opaque listing cursor.
func encodeCursor(last []byte) string {
	if len(last) == 0 {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(last)
}

func decodeCursor(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	c, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || len(c) == 0 {
		return nil, kverr.New(kverr.InvalidParams, "", "bad cursor %q: pass back next_cursor unchanged", s)
	}
	return c, nil
}
