// Package initiator owns kvtier's NVMe/TCP host: it connects to an NVMe/TCP
// controller (nof/target, SPDK's nvmf_tgt, Linux nvmet), brings it up
// (ICReq, Fabrics Connect, CC.EN, Identify, Number of Queues, active
// namespaces, one TCP connection per I/O queue) and reads, writes, flushes,
// zeroes and deallocates blocks with many commands outstanding per queue.
// The client SDK (NOF replicas), the appliance (remote namespaces) and the
// `kvtier nvme` CLI import it; it imports nof/pdu, nof/nvme, nof/auth, kverr.
//
// # Contract
//
//   - Dial connects admin queue + Config.IOQueues I/O queues (fewer if the
//     controller grants fewer) with the digests asked for; ICResp must echo
//     them exactly. KATO = Config.KeepAlive; a Keep Alive goes out every
//     KATO/2 and a failed one fails every queue.
//   - When a Connect response has AUTHREQ.ATR set the queue authenticates
//     (DH-HMAC-CHAP, nof/auth) before anything else: Negotiate offering
//     SHA-256 and Config.DHGroups, Reply, and with Config.DHCHAPCtrlSecret
//     the controller's response checked and Success2. No secret, a Failure1
//     or a controller that fails our check: the connect fails with
//     kverr.Unauthorized (errors.As finds *auth.FailureError). With a
//     controller secret, a controller that does not ask to authenticate is
//     refused too (it could not prove itself).
//   - Each queue has QueueDepth command slots; the slot index is the CID. A
//     completion (CapsuleResp, or a C2HData with SUCCESS) is matched by CID.
//     Writes up to the controller's in-capsule size (IOCCSZ*16-64) travel in
//     the capsule; larger ones wait for R2T and are sent as H2CData PDUs of at
//     most MAXH2CDATA. Transfers larger than MDTS are split and issued
//     concurrently. Commands are spread round-robin over the I/O queues.
//   - A cancelled context returns at once unless data is moving through the
//     caller's buffer at that instant, in which case the call returns when
//     that PDU is done; the slot is reused only after the controller
//     completes the command.
//   - Errors carry a kverr code (errors.As also finds *nvme.StatusError for
//     NVMe status): TransferFail for transport failures and most statuses,
//     InvalidParams for LBA out of range / invalid field / bad arguments,
//     ObjectNotFound for an unknown namespace, Unauthorized when Connect says
//     the host is not allowed, UnavailableInCurrentStatus after Close.
//   - Close shuts the controller down normally (CC.SHN, wait for SHST
//     complete up to 2 s); Reconnect drops the connections and dials again.
//
// Perf is the load generator behind `kvtier nvme perf`.
package initiator
