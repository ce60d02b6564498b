// Package nvme owns the NVMe command-level definitions that nof/target and
// nof/initiator share: opcodes, status codes, controller properties, and the
// byte layouts of Fabrics Connect data, Identify Controller / Namespace data,
// the active-namespace list, namespace identification descriptors and the
// discovery log page (NVM Express Base 2.0 and NVMe over Fabrics 1.1; offsets
// as in NVME-TCP-AND-SPDK-RPC.md §5). Transport framing lives in nof/pdu.
// Anything may import it.
//
// Byte layouts (little-endian; strings ASCII, NQNs NUL padded, SN/MN/FR and
// discovery TRSVCID/TRADDR space padded):
//
//	Connect data (1024): +0 HOSTID[16] +16 CNTLID u16 +256 SUBNQN[256] +512 HOSTNQN[256]
//	Identify Controller (4096): +0 VID +2 SSVID +4 SN[20] +24 MN[40] +64 FR[8] +72 RAB
//	  +76 CMIC +77 MDTS +78 CNTLID +80 VER +92 OAES +96 CTRATT +111 CNTRLTYPE
//	  +256 OACS +258 ACL +259 AERL +260 FRMW +261 LPA +262 ELPE +320 KAS u16
//	  +512 SQES +513 CQES +514 MAXCMD +516 NN +520 ONCS +525 VWC +536 SGLS
//	  +768 SUBNQN[256] +1792 IOCCSZ +1796 IORCSZ +1800 ICDOFF +1802 FCATT +1803 MSDBD
//	Identify Namespace (4096): +0 NSZE +8 NCAP +16 NUSE +24 NSFEAT +25 NLBAF
//	  +26 FLBAS +104 NGUID[16] +128 LBAF0 (LBADS in bits 23:16)
//	Discovery log: header 1024 {+0 GENCTR u64 +8 NUMREC u64 +16 RECFMT u16},
//	  entries of 1024 {+0 TRTYPE +1 ADRFAM +2 SUBTYPE +3 TREQ +4 PORTID +6 CNTLID
//	  +8 ASQSZ +10 EFLAGS +32 TRSVCID[32] +256 SUBNQN[256] +512 TRADDR[256] +768 TSAS[256]}
package nvme
