package tui

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/test/netproxy"
)

// downBound is how soon after the database goes away a refresh must show
// it: the refresh deadline, and scheduling slack on a busy machine.
const downBound = RefreshTimeoutDefault + time.Second

// proxied is a client of b's database through a proxy, its connection
// string the suite's with host and port moved to the proxy and sslmode set
// to sslmode.
func proxied(t *testing.T, b *dbBundle, sslmode string) (*partitionq.Client, *netproxy.Proxy) {
	t.Helper()
	server := b.pool.Config().ConnConfig
	if strings.HasPrefix(server.Host, "/") {
		t.Skipf("the test server is on a Unix socket (%s): a TCP proxy cannot stand in front of it", server.Host)
	}
	px, err := netproxy.New(net.JoinHostPort(server.Host, strconv.Itoa(int(server.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	cs, err := connstr.Parse(b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(px.Addr())
	cs.Set("host", host)
	cs.Set("port", port)
	cs.Set("sslmode", sslmode)
	cfg, err := pgxpool.ParseConfig(cs.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c, err := partitionq.NewClient(b.ctx, pool, partitionq.Config{EngineSchema: b.db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return c, px
}

// refreshDown refreshes m once and fails unless the refresh failed within
// downBound and the console says the database is down.
func refreshDown(t *testing.T, m *Model, failures int) []armedTick {
	t.Helper()
	start := time.Now()
	_, ticks := drive(t, m, refreshNowMsg{})
	if took := time.Since(start); took > downBound {
		t.Errorf("refresh %d after the database went away took %s; the bound is %s", failures, took.Round(time.Millisecond), downBound)
	}
	if m.ref.err == nil || m.ref.failures != failures {
		t.Fatalf("after refresh %d: %d failures, err %v; want %d failures", failures, m.ref.failures, m.ref.err, failures)
	}
	if v := m.View(); !strings.Contains(v, "DB DOWN") || !strings.Contains(v, "Database unreachable") {
		t.Fatalf("the view does not say the database is away:\n%s", v)
	}
	return ticks
}

// The console sees a lost database within the refresh deadline, whether
// the connection is refused, frozen (a network partition: nothing answers,
// nothing closes) or frozen while pgx connects (under sslmode=prefer the
// TLS attempt then waits, and the attempt without TLS after it): each
// refresh fails by its deadline and the next one does not wait for it.
func TestDatabaseGoesAway(t *testing.T) {
	t.Parallel()
	b := setupDB(t)
	for _, c := range []struct {
		name    string
		cut     func(*netproxy.Proxy)
		recover bool
	}{
		{"refused", func(px *netproxy.Proxy) { px.Close() }, false},
		{"frozen", (*netproxy.Proxy).Freeze, true},
		{"frozen while connecting", func(px *netproxy.Proxy) { px.DropAll(); px.Freeze() }, true},
	} {
		for _, sslmode := range []string{"prefer", "disable"} {
			t.Run(c.name+"/sslmode="+sslmode, func(t *testing.T) {
				t.Parallel()
				client, px := proxied(t, b, sslmode)
				m := realModel(t, client)
				drive(t, m, m.Init()())
				if m.ref.err != nil || m.last.status.Slots != 2 {
					t.Fatalf("first refresh: %v", m.ref.err)
				}

				c.cut(px)
				refreshDown(t, m, 1)
				ticks := refreshDown(t, m, 2)
				if len(ticks) != 1 || ticks[0].d <= m.sh.refresh {
					t.Fatalf("after %d failures the next refresh is armed in %+v; want a backoff", m.ref.failures, ticks)
				}
				if !c.recover {
					return
				}
				px.Resume()
				refreshUntil(t, m, 30*time.Second, "the console to recover", func() bool { return m.ref.err == nil })
				if v := m.View(); strings.Contains(v, "unreachable") || !strings.Contains(v, "● live") {
					t.Fatalf("after recovery:\n%s", v)
				}
			})
		}
	}
}

// hangingClient is a client whose Status never answers until released,
// whatever its context says: a call stuck in a way no deadline reaches.
type hangingClient struct {
	*fakeClient
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (h *hangingClient) Status(ctx context.Context, queue, group string) (partitionq.GroupStatus, error) {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	<-h.release
	return partitionq.GroupStatus{}, errors.New("released")
}

func TestRefreshThatHangsDoesNotBlockTheNext(t *testing.T) {
	h := &hangingClient{fakeClient: newFake(), release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	m := newTestModel(t, h, Options{RefreshTimeout: RefreshMin})
	drive(t, m, tea.WindowSizeMsg{Width: 100, Height: 30})

	start := time.Now()
	_, ticks := drive(t, m, m.Init()())
	if took := time.Since(start); took > RefreshMin+time.Second {
		t.Errorf("the hanging refresh took %s to count as failed; its deadline is %s", took, RefreshMin)
	}
	if m.ref.failures != 1 || !errors.Is(m.ref.err, context.DeadlineExceeded) || m.ref.inFlight {
		t.Fatalf("after the deadline: %d failures, err %v, in flight %v; want 1 failure, a deadline error, nothing in flight", m.ref.failures, m.ref.err, m.ref.inFlight)
	}
	if !strings.Contains(m.ref.err.Error(), "no answer within 100ms") {
		t.Errorf("the error does not name the deadline: %v", m.ref.err)
	}
	if v := m.View(); !strings.Contains(v, "DB DOWN") {
		t.Fatalf("the view does not say the database is down:\n%s", v)
	}
	if len(ticks) != 1 {
		t.Fatalf("ticks armed: %+v", ticks)
	}

	// The tick's refresh goes ahead although the first call still hangs.
	drive(t, m, ticks[0].msg)
	h.mu.Lock()
	calls := h.calls
	h.mu.Unlock()
	if calls != 2 || m.ref.failures != 2 {
		t.Fatalf("after the next tick: %d calls to Status, %d failures; want 2 and 2", calls, m.ref.failures)
	}
}

func TestRefreshTimeoutOption(t *testing.T) {
	m, err := NewModel(context.Background(), newFake(), Options{Queue: "files", Group: "indexer"})
	if err != nil {
		t.Fatal(err)
	}
	if m.sh.refreshLimit != RefreshTimeoutDefault {
		t.Errorf("default refresh deadline %s, want %s", m.sh.refreshLimit, RefreshTimeoutDefault)
	}
	_, err = NewModel(context.Background(), newFake(), Options{Queue: "files", Group: "indexer", RefreshTimeout: time.Millisecond})
	var ve *partitionq.ValidationError
	if !errors.As(err, &ve) || ve.Field != "Options.RefreshTimeout" {
		t.Fatalf("a 1ms refresh deadline: %v", err)
	}
}

// Issue 28: a refresh in flight (here one whose Status hangs, as on a slow
// database) never holds the keys: Update hands the read to a command and
// returns, and the keys pressed meanwhile move, switch views and open
// dialogs at once.
func TestKeysAnswerWhileARefreshIsInFlight(t *testing.T) {
	h := &hangingClient{fakeClient: newFake(), release: make(chan struct{})}
	m := incidentModel(t, Options{}, 100, 30)
	m.sh.client = h
	cmd := m.refreshNow() // the read, not run: Bubble Tea runs it on a goroutine of its own
	if cmd == nil || !m.ref.inFlight {
		t.Fatalf("no refresh in flight (cmd %v, in flight %v)", cmd, m.ref.inFlight)
	}
	done := make(chan struct{})
	go func() { cmd(); close(done) }() // hangs until released
	start := time.Now()
	press(t, m, "2", "down", "s") // runs what the keys return; a refresh asked meanwhile waits for the one in flight
	if took := time.Since(start); !m.confirmOpen || m.active != tabBlocked || took > time.Second {
		t.Fatalf("keys during the refresh: confirm open %v, view %v, after %s", m.confirmOpen, m.active, took)
	}
	close(h.release)
	<-done
}
