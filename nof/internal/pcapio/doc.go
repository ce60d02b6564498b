// Package pcapio reads pcap and pcapng captures of TCP traffic, reassembles
// each TCP connection's two byte streams, and writes classic pcap files of
// synthetic TCP connections (for feeding our own traffic to tshark). It is a
// test helper for the nof packages only; stdlib only.
//
// Written format (classic pcap, little-endian, LINKTYPE_ETHERNET): a 24-byte
// global header (magic 0xA1B2C3D4, v2.4, snaplen 262144), then per frame a
// 16-byte record header (ts sec, ts usec, incl len, orig len) and an
// Ethernet II + IPv4 (no options) + TCP (no options) frame. Each connection
// starts with SYN, SYN-ACK, ACK so dissectors see its beginning.
package pcapio
