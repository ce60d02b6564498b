package auth

import (
	"crypto/rand"
	"fmt"
	"math/big"
)

// DH group ids (DH-HMAC-CHAP).
const (
	DHNull      uint8 = 0
	DHFFDHE2048 uint8 = 1
)

// ffdhe2048 is the RFC 7919 appendix A.1 prime, generator 2.
const ffdhe2048Hex = "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1" +
	"D8B9C583CE2D3695A9E13641146433FBCC939DCE249B3EF9" +
	"7D2FE363630C75D8F681B202AEC4617AD3DF1ED5D5FD6561" +
	"2433F51F5F066ED0856365553DED1AF3B557135E7F57C935" +
	"984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE735" +
	"30ACCA4F483A797ABC0AB182B324FB61D108A94BB2C8E3FB" +
	"B96ADAB760D7F4681D4F42A3DE394DF4AE56EDE76372BB19" +
	"0B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61" +
	"9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD73" +
	"3BB5FCBC2EC22005C58EF1837D1683B2C6F34A26C1B2EFFA" +
	"886B423861285C97FFFFFFFFFFFFFFFF"

var ffdhe2048P, _ = new(big.Int).SetString(ffdhe2048Hex, 16)

// Prime returns the group's prime (nil for NULL or an unknown group).
func Prime(group uint8) *big.Int {
	if group == DHFFDHE2048 {
		return new(big.Int).Set(ffdhe2048P)
	}
	return nil
}

// DHValueLen is the length of a public value of group (0 for NULL).
func DHValueLen(group uint8) int {
	if group == DHFFDHE2048 {
		return 256
	}
	return 0
}

// SupportedGroup says whether group is offered.
func SupportedGroup(group uint8) bool { return group == DHNull || group == DHFFDHE2048 }

// DH is one side's ephemeral key pair in a group.
type DH struct {
	group uint8
	x     *big.Int
	Pub   []byte // g^x mod p, big-endian, DHValueLen bytes
}

// NewDH draws an ephemeral private exponent (256 bits, twice the group's
// 112-bit strength as RFC 7919 suggests at least) and its public value.
func NewDH(group uint8) (*DH, error) {
	p := Prime(group)
	if p == nil {
		return nil, fmt.Errorf("nvme auth: DH group %d not supported", group)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	x := new(big.Int).SetBytes(b)
	x.SetBit(x, 255, 1) // never a tiny exponent
	y := new(big.Int).Exp(big.NewInt(2), x, p)
	return &DH{group: group, x: x, Pub: y.FillBytes(make([]byte, DHValueLen(group)))}, nil
}

// Shared is the session key peer^x mod p, padded to the prime's length.
// A peer value outside 2..p-2 is refused (it would force the key).
func (d *DH) Shared(peer []byte) ([]byte, error) {
	p := Prime(d.group)
	if len(peer) != DHValueLen(d.group) {
		return nil, fmt.Errorf("nvme auth: DH value is %d bytes, want %d", len(peer), DHValueLen(d.group))
	}
	y := new(big.Int).SetBytes(peer)
	pm1 := new(big.Int).Sub(p, big.NewInt(1))
	if y.Cmp(big.NewInt(1)) <= 0 || y.Cmp(pm1) >= 0 {
		return nil, fmt.Errorf("nvme auth: DH value out of range")
	}
	z := new(big.Int).Exp(y, d.x, p)
	return z.FillBytes(make([]byte, DHValueLen(d.group))), nil
}
