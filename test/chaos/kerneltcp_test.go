package chaos

import (
	"net/netip"
	"testing"
)

// A line of /proc/net/tcp as the kernel writes it: 10.213.7.2:51414 to
// 10.213.7.1:40221, established, 53 bytes unacknowledged, the
// retransmission timer on after 3 retransmits.
func TestParseTCPLine(t *testing.T) {
	c, err := parseTCPLine("   4: 0107D50A:9D1D 0207D50A:C8D6 01 00000035:00000000 01:000000C8 00000003     0        0 0 3 0000000000000000 26 4 30 10 -1")
	if err != nil {
		t.Fatal(err)
	}
	want := tcpConn{local: netip.MustParseAddrPort("10.213.7.1:40221"), remote: netip.MustParseAddrPort("10.213.7.2:51414"),
		state: 1, txQueue: 53, timer: 1, when: "000000C8", retransmits: 3}
	if c != want {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
	for _, bad := range []string{"   4: 0107D50A:9D1D", "   4: 0107D50A 0207D50A:C8D6 01 00000035:00000000 01:000000C8 00000003", "   4: 0107D50A:9D1D 0207D50A:C8D6 zz 00000035:00000000 01:000000C8 00000003"} {
		if _, err := parseTCPLine(bad); err == nil {
			t.Errorf("parseTCPLine(%q) = nil error, want one", bad)
		}
	}
}
