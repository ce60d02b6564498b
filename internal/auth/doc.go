// Package auth owns who may talk to a kvtier master: the credential file
// (one `ROLE TOKEN [TENANT]` a line), the roles (admin, appliance, client),
// the table from each gRPC method to the least role that may call it, and
// the principal a call carries in its context.
//
// Tokens are never compared byte by byte: a token is looked up by its
// SHA-256 digest in a map, so the time a lookup takes depends on the
// digest, which an attacker cannot steer towards a stored token, and not on
// how many leading bytes of a guess are right.
//
// Roles nest: admin may do everything an appliance may, an appliance
// everything a client may. A client credential with a tenant is confined to
// that tenant; without one it may name any tenant. An appliance or admin
// credential is never confined (offload and recovery touch every tenant).
//
// A Store holds the current credentials and re-reads its file on Reload
// (SIGHUP); a bad file keeps the previous credentials and reports why.
package auth
