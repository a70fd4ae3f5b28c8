package netproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/partitionq/partitionq/test/netproxy"
)

// TestMain fails the tests when the proxy leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet is how long a test waits to see that nothing comes through: the
// proxy holds bytes back forever while frozen, so any wait shows it.
const quiet = 200 * time.Millisecond

// server is the proxy's target: it hands the test each connection it
// accepts, so the test acts as both ends.
type server struct {
	ln    net.Listener
	conns chan net.Conn
}

func newServer(t *testing.T) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, conns: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(s.conns)
		for c := range s.conns {
			c.Close()
		}
	})
	return s
}

// accepted returns the next connection the server accepted, or fails.
func (s *server) accepted(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the server accepted no connection")
		return nil
	}
}

// none fails if the server accepts a connection within quiet.
func (s *server) none(t *testing.T) {
	t.Helper()
	select {
	case c := <-s.conns:
		c.Close()
		t.Fatal("the server accepted a connection through a frozen proxy")
	case <-time.After(quiet):
	}
}

func setup(t *testing.T) (*server, *netproxy.Proxy) {
	t.Helper()
	s := newServer(t)
	p, err := netproxy.New(s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return s, p
}

func dial(t *testing.T, p *netproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// expect reads exactly want from c.
func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

// silent fails unless reading c times out after quiet: nothing came, and
// the connection is still open.
func silent(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(quiet))
	var b [1]byte
	n, err := c.Read(b[:])
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want nothing, the connection open", n, err)
	}
}

// broken fails unless reading c fails at once (reset or closed).
func broken(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	n, err := c.Read(b[:])
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want the connection broken", n, err)
	}
}

func TestForwardsBothWays(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	c := dial(t, p)
	sc := s.accepted(t)
	send(t, c, "ping")
	expect(t, sc, "ping")
	send(t, sc, "pong")
	expect(t, c, "pong")
}

func TestFreezeHoldsBothWaysAndResumeDelivers(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	c := dial(t, p)
	sc := s.accepted(t)
	send(t, c, "a")
	expect(t, sc, "a")

	p.Freeze()
	p.Freeze() // twice is once
	send(t, c, "to server")
	send(t, sc, "to client")
	silent(t, sc)
	silent(t, c)

	p.Resume()
	expect(t, sc, "to server")
	expect(t, c, "to client")
	p.Resume() // not frozen: nothing
	send(t, c, "b")
	expect(t, sc, "b")
}

func TestFrozenProxyAcceptsButDoesNotConnect(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	p.Freeze()
	c := dial(t, p) // the proxy accepts, as a kernel would before the partition
	send(t, c, "hello")
	s.none(t)
	silent(t, c)

	p.Resume()
	sc := s.accepted(t)
	expect(t, sc, "hello")
}

func TestDropAllResetsEveryConnection(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	// One at a time: the proxy dials the server for each client on its
	// own, so two dialled at once may reach the server in either order.
	c1 := dial(t, p)
	sc1 := s.accepted(t)
	c2 := dial(t, p)
	sc2 := s.accepted(t)
	send(t, c1, "x")
	expect(t, sc1, "x")
	send(t, c2, "y")
	expect(t, sc2, "y")

	p.DropAll()
	for _, c := range []net.Conn{c1, c2, sc1, sc2} {
		broken(t, c)
	}
	// Still a proxy: a new connection goes through.
	c3 := dial(t, p)
	sc3 := s.accepted(t)
	send(t, c3, "z")
	expect(t, sc3, "z")
}

func TestDropAllWhileFrozen(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	c := dial(t, p)
	sc := s.accepted(t)
	p.Freeze()
	send(t, c, "held")
	p.DropAll()
	broken(t, c)
	broken(t, sc)

	// Still frozen for new connections, until Resume.
	c2 := dial(t, p)
	s.none(t)
	p.Resume()
	send(t, c2, "after")
	expect(t, s.accepted(t), "after")
}

func TestCloseRefusesAndResets(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	c := dial(t, p)
	sc := s.accepted(t)
	p.Freeze()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	broken(t, c)
	broken(t, sc)
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Fatal("a closed proxy accepts connections")
	}
}
