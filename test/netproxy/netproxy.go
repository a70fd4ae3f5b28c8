// Package netproxy is a TCP proxy for tests that need the network to fail:
// it forwards every connection it accepts to a target, and on demand
// freezes them as a network partition does (Freeze, Resume) or resets them
// all (DropAll).
//
//	px, err := netproxy.New("127.0.0.1:5432")
//	... connect to px.Addr() instead of the server ...
//	px.Freeze() // nothing gets through, nothing is closed
//	px.Resume() // what was held back goes through
//	px.DropAll() // every connection is reset
//	px.Close()
//
// A Proxy is safe for concurrent use.
package netproxy

import (
	"errors"
	"net"
	"sync"
)

// Proxy forwards the connections made to Addr to its target.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and every forwarding goroutine
	done   chan struct{}  // closed by Close

	mu     sync.Mutex
	thawed chan struct{} // closed while forwarding; open while frozen
	links  map[*link]struct{}
	closed bool
}

// link is one client connection and its connection to the target.
type link struct {
	in, out net.Conn      // out is nil until dialed
	gone    chan struct{} // closed when the link ends
}

// New starts a proxy on 127.0.0.1, on a port of its own, that forwards to
// target ("host:port"). It dials target once per connection it accepts,
// when it accepts it (or, while frozen, on Resume).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, done: make(chan struct{}), thawed: make(chan struct{}), links: map[*link]struct{}{}}
	close(p.thawed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to: 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops forwarding in both directions, as a network partition
// does: every connection stays open, bytes sent either way are held back
// (the senders block once the buffers fill), new connections are accepted
// but not passed on. Nothing times out in the proxy: a client waits until
// its own deadline. Freezing a frozen proxy does nothing.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default:
	}
}

// Resume forwards again what Freeze held back, and from then on.
// Resuming a proxy that is not frozen does nothing.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// DropAll resets every connection the proxy has accepted, both to the
// client (a TCP reset) and to the target, as a crashed router or a restarted server does; what Freeze
// held back is lost. The proxy goes on accepting new connections, frozen
// or not as it was.
func (p *Proxy) DropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		p.endLocked(l, true)
	}
}

// Close stops the proxy: it stops listening (a new connection is refused),
// resets every connection and returns when every goroutine of the proxy
// has ended. Calling it again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	err := p.ln.Close()
	p.mu.Unlock()
	p.DropAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		l := &link{in: in, gone: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			reset(in)
			continue
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(l)
	}
}

// serve connects l to the target once the proxy forwards, and copies both
// ways until either side ends.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	if !p.waitThawed(l) {
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		p.end(l, false)
		return
	}
	p.mu.Lock()
	if _, ok := p.links[l]; !ok {
		p.mu.Unlock()
		reset(out)
		return
	}
	l.out = out
	p.mu.Unlock()
	p.wg.Add(2)
	go p.pipe(l, out, l.in)
	go p.pipe(l, l.in, out)
}

// pipe copies from src to dst, holding each chunk back while the proxy is
// frozen, until either side ends; then it ends the link.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	defer p.wg.Done()
	defer p.end(l, false)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitThawed(l) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitThawed waits until the proxy forwards; false if the link ended or
// the proxy closed meanwhile.
func (p *Proxy) waitThawed(l *link) bool {
	p.mu.Lock()
	thawed := p.thawed
	p.mu.Unlock()
	select {
	case <-thawed:
		return true
	case <-l.gone:
	case <-p.done:
	}
	return false
}

// end closes both connections of l (with a reset when abrupt), once.
func (p *Proxy) end(l *link, abrupt bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked(l, abrupt)
}

func (p *Proxy) endLocked(l *link, abrupt bool) {
	if _, ok := p.links[l]; !ok {
		return
	}
	delete(p.links, l)
	close(l.gone)
	for _, c := range []net.Conn{l.in, l.out} {
		if c == nil {
			continue
		}
		if abrupt {
			reset(c)
		} else {
			_ = c.Close()
		}
	}
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with a reset, not a graceful FIN
	}
	_ = c.Close()
}
