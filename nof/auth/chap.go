package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// HashSHA256 is the only HMAC hash id offered (hash id 1).
const HashSHA256 uint8 = 1

// HashLen is the length of challenges and responses with SHA-256.
const HashLen = 32

// AugmentedChallenge is HMAC(H(sessionKey), challenge): with a DH group the
// responses are computed over it instead of the plain challenge. With the
// NULL group (empty session key) it returns the challenge.
func AugmentedChallenge(challenge, sessionKey []byte) []byte {
	if len(sessionKey) == 0 {
		return challenge
	}
	k := sha256.Sum256(sessionKey)
	m := hmac.New(sha256.New, k[:])
	m.Write(challenge)
	return m.Sum(nil)
}

// HostResponse is the host's response R1 to challenge C1:
// HMAC(Kh, C1' || S1 (LE32) || T_ID (LE16) || SC_C || "HostHost" ||
// hostNQN || 0x00 || subNQN), Kh the transformed host key, C1' the
// (augmented) challenge.
func HostResponse(key, challenge []byte, seq uint32, tid uint16, scc uint8, hostNQN, subNQN string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(challenge)
	m.Write(binary.LittleEndian.AppendUint32(nil, seq))
	m.Write(binary.LittleEndian.AppendUint16(nil, tid))
	m.Write([]byte{scc})
	m.Write([]byte("HostHost"))
	m.Write([]byte(hostNQN))
	m.Write([]byte{0})
	m.Write([]byte(subNQN))
	return m.Sum(nil)
}

// ControllerResponse is the controller's response R2 to the host's
// challenge C2: HMAC(Kc, C2' || S2 (LE32) || T_ID (LE16) || 0x00 ||
// "Controller" || subNQN || 0x00 || hostNQN).
func ControllerResponse(key, challenge []byte, seq uint32, tid uint16, subNQN, hostNQN string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(challenge)
	m.Write(binary.LittleEndian.AppendUint32(nil, seq))
	m.Write(binary.LittleEndian.AppendUint16(nil, tid))
	m.Write([]byte{0})
	m.Write([]byte("Controller"))
	m.Write([]byte(subNQN))
	m.Write([]byte{0})
	m.Write([]byte(hostNQN))
	return m.Sum(nil)
}

// Equal compares two responses in constant time.
func Equal(a, b []byte) bool { return hmac.Equal(a, b) }
