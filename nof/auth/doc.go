// Package auth owns NVMe in-band authentication (NVMe Base Specification
// 2.x, section "DH-HMAC-CHAP"): the DHHC-1 secret representation that
// nvme-cli and SPDK use, the key transformation, the DH-HMAC-CHAP message
// encodings carried by the Authentication Send / Authentication Receive
// fabrics commands (fctype 0x05 / 0x06), the HMAC responses of host and
// controller, and the finite-field Diffie-Hellman groups (NULL and the
// RFC 7919 ffdhe groups).
//
// It holds no connection state: nof/target runs the controller side of a
// transaction and nof/initiator the host side, each with the functions
// here. Only SHA-256 (hash id 1) is offered as the HMAC; secrets whose
// transformation hash is SHA-384 or SHA-512 are still parsed and
// transformed, since the transformation hash and the HMAC are independent.
//
// Layouts and HMAC input orders follow the specification as implemented by
// Linux (drivers/nvme/host/auth.c, drivers/nvme/target/fabrics-cmd-auth.c)
// and SPDK (lib/nvmf/auth.c), so either can be the peer of ours.
package auth
