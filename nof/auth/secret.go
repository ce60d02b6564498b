package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"os"
	"strings"
)

// Secret is a parsed DHHC-1 secret: the key and the hash that transforms
// it before use (0 = none).
type Secret struct {
	Key       []byte // 32, 48 or 64 bytes
	Transform uint8  // 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512
}

// ParseSecret parses "DHHC-1:<hh>:<base64 of key || CRC-32(key) LE>:", the
// representation nvme-cli's gen-dhchap-key prints and SPDK and Linux
// accept. It checks the transform id, the key length and the CRC.
func ParseSecret(s string) (*Secret, error) {
	rest, ok := strings.CutPrefix(s, "DHHC-1:")
	if !ok {
		return nil, fmt.Errorf("nvme auth: secret does not start with \"DHHC-1:\"")
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 || parts[2] != "" {
		return nil, fmt.Errorf("nvme auth: secret is not DHHC-1:<hh>:<base64>:")
	}
	if len(parts[0]) != 2 || parts[0][0] != '0' || parts[0][1] < '0' || parts[0][1] > '3' {
		return nil, fmt.Errorf("nvme auth: secret transform %q not in 00..03", parts[0])
	}
	tr := parts[0][1] - '0'
	raw, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("nvme auth: secret key is not base64: %v", err)
	}
	n := len(raw) - 4
	if n != 32 && n != 48 && n != 64 {
		return nil, fmt.Errorf("nvme auth: secret key is %d bytes, want 32, 48 or 64", max(n, 0))
	}
	key, sum := raw[:n], binary.LittleEndian.Uint32(raw[n:])
	if crc32.ChecksumIEEE(key) != sum {
		return nil, fmt.Errorf("nvme auth: secret CRC-32 does not match its key")
	}
	return &Secret{Key: append([]byte(nil), key...), Transform: tr}, nil
}

// LoadSecret parses a secret given as is ("DHHC-1:...") or as "@FILE", a
// file holding one (a flag or variable then does not show the key).
func LoadSecret(val string) (*Secret, error) {
	if path, ok := strings.CutPrefix(val, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("nvme auth: secret file: %v", err)
		}
		val = strings.TrimSpace(string(b))
	}
	return ParseSecret(val)
}

// String is the DHHC-1 representation of s.
func (s *Secret) String() string {
	raw := binary.LittleEndian.AppendUint32(append([]byte(nil), s.Key...), crc32.ChecksumIEEE(s.Key))
	return fmt.Sprintf("DHHC-1:%02d:%s:", s.Transform, base64.StdEncoding.EncodeToString(raw))
}

func hashLen(id uint8) int {
	switch id {
	case 2:
		return 48
	case 3:
		return 64
	}
	return 32
}

func newHash(id uint8) func() hash.Hash {
	switch id {
	case 2:
		return sha512.New384
	case 3:
		return sha512.New
	}
	return sha256.New
}

// TransformedKey is the key the HMAC responses use: the key itself when
// the transform is 0, else HMAC-hh(key, NQN || "NVMe-over-Fabrics"), NQN
// being the owner's: the host NQN for a host secret, the subsystem NQN for
// a controller secret (as Linux and SPDK transform them).
func (s *Secret) TransformedKey(nqn string) []byte {
	if s.Transform == 0 {
		return append([]byte(nil), s.Key...)
	}
	m := hmac.New(newHash(s.Transform), s.Key)
	m.Write([]byte(nqn))
	m.Write([]byte("NVMe-over-Fabrics"))
	return m.Sum(nil)
}
