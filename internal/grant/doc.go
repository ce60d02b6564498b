// Package grant owns kvtier's data-plane grants: short capabilities the
// master signs for one replica extent and the appliance verifies before a
// byte moves over its data port.
//
// # Contract
//
// A grant is an HMAC-SHA256, keyed by a per-appliance secret, over
// {segment, bucket, offset, length, op (read or write), client session,
// expiry}. The master generates each appliance's secret (crypto/rand) when
// the appliance mounts, hands it over the control channel, rotates it and
// signs every replica location it hands out with the newest secret the
// appliance holds. The appliance's transfer engine verifies (Keyring.Verify)
// every request against the keys it holds (current and previous, so a
// rotation never refuses a grant in flight): the MAC in constant time
// (hmac.Equal), the expiry, the op, and that the requested range lies inside
// the signed extent (a request may be a slice of it). Any failure is a
// *Refusal naming its Reason; nothing else about the key leaks.
//
// The segment name is covered by the MAC but not carried in the token: the
// verifier supplies the segment the request names, so a grant for another
// segment fails as a forgery.
//
// The session is a 16-byte value naming whom the grant was issued to: with
// credentials, the authenticated credential (SessionOfPrincipal of
// auth.Principal.ID, the same for every client ID that credential uses);
// open, the client ID the call named (SessionOf). It is signed, so it
// cannot be altered, but the data port does not check it: the appliance
// holds no credential table and its peers prove nothing on connecting, and
// the session travels in the clear inside the token, so a peer could not
// prove it by merely naming it. A grant is therefore a bearer capability
// for its extent and op until its expiry: anyone who obtains it (it
// travels only over the control channel and the data connection, both of
// which TLS can protect) can use it within those bounds. The session
// serves attribution (who was handed the grant a refused or suspicious
// request carried). Binding use to the session would need a proof of
// possession the appliance can check without the credential table: for
// instance a per-session key HMAC(node secret, session) that the master
// hands the client beside the grant over the authenticated control
// channel and the client uses to answer a per-connection challenge of the
// appliance, which derives the same key from its own secret. That is a
// wire change (a proto field and a transfer handshake) not made yet.
//
// # Token layout (version 1, 88 bytes, big-endian)
//
//	offset size field
//	0      1    version = 1
//	1      1    op: 1 = READ, 2 = WRITE
//	2      2    reserved, 0
//	4      4    key ID (which appliance secret signed it)
//	8      8    bucket (extent sources; 0 for memory segments)
//	16     8    offset of the extent
//	24     8    length of the extent, >= 1
//	32     8    expiry, unix nanoseconds
//	40     16   client session
//	56     32   HMAC-SHA256 over "kvtier-grant-v1", bytes 0..55, a 1-byte
//	            segment-name length and the segment name
//
// # Imports
//
// grant imports only the standard library: the master (signing) and the
// transfer engine (verifying) both import it.
package grant
