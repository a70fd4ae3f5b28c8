package chaos

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The kernel's own view of the server's connections, read from
// /proc/net/tcp of the host's namespace (no process to start, no query to
// answer): a vanished host's sessions end when the kernel gives up on
// their connections, which is what the worker's TCP settings decide; the
// server's processes notice that a moment later, more on a loaded machine.

// tcpConn is one line of /proc/net/tcp.
type tcpConn struct {
	local, remote netip.AddrPort
	state         int // 1: established
	txQueue       int // bytes sent and not acknowledged
	timer         int // 0 none, 1 retransmission, 2 keepalive, 4 zero-window probe
	when          string
	retransmits   int
}

// serverConns returns the established connections from ip's ports from to
// the server's port, as the kernel sees them.
func serverConns(ip string, port int, from []int) ([]tcpConn, error) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tcpConn
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		c, err := parseTCPLine(sc.Text())
		if err != nil {
			return nil, err
		}
		if c.state == 1 && c.remote.Addr() == addr && slices.Contains(from, int(c.remote.Port())) && int(c.local.Port()) == port {
			out = append(out, c)
		}
	}
	return out, sc.Err()
}

// parseTCPLine reads "sl local rem st tx:rx tr:when retrnsmt ...", its
// IPv4 addresses in the host's byte order (little-endian here), its ports
// big-endian, all in hex.
func parseTCPLine(line string) (tcpConn, error) {
	var c tcpConn
	f := strings.Fields(line)
	if len(f) < 7 {
		return c, fmt.Errorf("/proc/net/tcp: a short line %q", line)
	}
	var err error
	if c.local, err = parseHexAddr(f[1]); err != nil {
		return c, err
	}
	if c.remote, err = parseHexAddr(f[2]); err != nil {
		return c, err
	}
	st, err := strconv.ParseInt(f[3], 16, 32)
	if err != nil {
		return c, fmt.Errorf("/proc/net/tcp: state %q: %w", f[3], err)
	}
	c.state = int(st)
	tx, _, _ := strings.Cut(f[4], ":")
	q, err := strconv.ParseInt(tx, 16, 64)
	if err != nil {
		return c, fmt.Errorf("/proc/net/tcp: queue %q: %w", f[4], err)
	}
	c.txQueue = int(q)
	tr, when, _ := strings.Cut(f[5], ":")
	t, err := strconv.ParseInt(tr, 16, 32)
	if err != nil {
		return c, fmt.Errorf("/proc/net/tcp: timer %q: %w", f[5], err)
	}
	c.timer, c.when = int(t), when
	r, err := strconv.ParseInt(f[6], 16, 32)
	if err != nil {
		return c, fmt.Errorf("/proc/net/tcp: retransmits %q: %w", f[6], err)
	}
	c.retransmits = int(r)
	return c, nil
}

func parseHexAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok || len(h) != 8 {
		return netip.AddrPort{}, fmt.Errorf("/proc/net/tcp: address %q", s)
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("/proc/net/tcp: address %q: %w", s, err)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("/proc/net/tcp: port %q: %w", s, err)
	}
	a := netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
	return netip.AddrPortFrom(a, uint16(port)), nil
}

func (c tcpConn) String() string {
	timer := map[int]string{0: "no timer", 1: "retransmission timer", 2: "keepalive timer", 3: "time-wait timer", 4: "zero-window probe timer"}[c.timer]
	if timer == "" {
		timer = "timer " + strconv.Itoa(c.timer)
	}
	return fmt.Sprintf("%s: %d bytes unacknowledged, %s (in %s jiffies), %d retransmits", c.remote, c.txQueue, timer, c.when, c.retransmits)
}
