package partitionq_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// received is one request an HTTP handler made.
type received struct {
	header http.Header
	body   string
}

// The HTTP handler posts each event as a CloudEvent in binary mode: the
// payload as the body, the attributes as headers, the key percent-encoded.
func TestHTTPHandlerPostsCloudEvents(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	var mu sync.Mutex
	got := map[string]received{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.Header.Get("Ce-Id")] = received{r.Header.Clone(), string(body)}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	authorized := atomic.Int64{}
	h, err := partitionq.NewHTTPHandler(partitionq.HTTPHandlerConfig{URL: srv.URL + "/events", Authorize: func(r *http.Request) error {
		authorized.Add(1)
		r.Header.Set("Authorization", "Bearer s3cret")
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	key := "tenant 42/\u00fc\"%\n"
	res, err := b.client.SendBatch(b.ctx, "q", []partitionq.Message{
		{Key: key, Type: "FileCreated", Payload: []byte(`{"path":"/a"}`)},
		{Key: "plain", Payload: []byte("not json")},
		{Key: "empty"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.worker(t, partitionq.WorkerConfig{Handler: h})
	pgtest.WaitFor(t, 30*time.Second, "3 requests", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 3, nil
	})
	first := got[fmt.Sprint(res[0].ID)]
	for name, want := range map[string]string{
		"Ce-Specversion":       "1.0",
		"Ce-Id":                fmt.Sprint(res[0].ID),
		"Ce-Source":            "/partitionq/q/g",
		"Ce-Type":              "FileCreated",
		"Ce-Subject":           "tenant%2042/%C3%BC%22%25%0A",
		"Ce-Partitionqslots":   "2",
		"Ce-Partitionqattempt": "1",
		"Content-Type":         "application/json",
		"Authorization":        "Bearer s3cret",
	} {
		if v := first.header.Get(name); v != want {
			t.Errorf("%s: %q, want %q", name, v, want)
		}
	}
	slot, epoch := first.header.Get("Ce-Partitionqslot"), first.header.Get("Ce-Partitionqepoch")
	if slot == "" || epoch == "" || first.header.Get("Ce-Partitionqfence") != "q/g/2/"+slot+"/"+epoch {
		t.Errorf("slot %q, epoch %q, fence %q: want the fence q/g/2/<slot>/<epoch>", slot, epoch, first.header.Get("Ce-Partitionqfence"))
	}
	if _, err := time.Parse(time.RFC3339Nano, first.header.Get("Ce-Time")); err != nil {
		t.Errorf("ce-time %q: %v", first.header.Get("Ce-Time"), err)
	}
	if first.body != `{"path":"/a"}` {
		t.Errorf("body %q, want the payload", first.body)
	}
	plain := got[fmt.Sprint(res[1].ID)]
	if ct, typ := plain.header.Get("Content-Type"), plain.header.Get("Ce-Type"); ct != "text/plain; charset=utf-8" || typ != partitionq.HTTPUntypedType {
		t.Errorf("a payload that is not JSON, without a type: content type %q, type %q", ct, typ)
	}
	empty := got[fmt.Sprint(res[2].ID)]
	if ct, body := empty.header.Get("Content-Type"), empty.body; ct != "" || body != "" {
		t.Errorf("an empty payload: content type %q, body %q; want none", ct, body)
	}
	if n := authorized.Load(); n != 3 {
		t.Errorf("Authorize called %d times, want once per request", n)
	}
}

// Requests reuse kept-alive connections: as many connections as requests
// in flight at most, however many events.
func TestHTTPHandlerKeepsConnections(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	var conns atomic.Int64
	var handled atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		handled.Add(1)
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	const inFlight = 2*4 + 1 // slots x concurrency + drains
	h, err := partitionq.NewHTTPHandler(partitionq.HTTPHandlerConfig{URL: srv.URL, MaxConns: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	b.sendRounds(t, 16, 25)
	b.worker(t, partitionq.WorkerConfig{Handler: h, Limits: partitionq.LimitsConfig{Concurrency: 4, DrainConcurrency: 1}})
	pgtest.WaitFor(t, 60*time.Second, "400 events handled", func() (bool, error) { return handled.Load() == 400, nil })
	// Kept alive: a connection serves many requests. (Not at most one per
	// request in flight: the handler closes a connection idle for a second,
	// and on a loaded machine a connection may wait that long between two
	// requests; without keep-alive there would be 400.)
	if n := conns.Load(); n > 400/8 {
		t.Errorf("%d connections for 400 requests, at most %d in flight: want them kept alive", n, inFlight)
	}
}

// The responses' words: 2xx is done; other statuses fail, with the body's
// start as the error; Partitionq-Outcome: dead-letter and Retry-After
// change the failure; a redirect is not followed.
func TestHTTPHandlerOutcomes(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch string(body) {
		case "ok":
			w.WriteHeader(http.StatusAccepted)
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "  disk full\n")
		case "dead":
			w.Header().Set(partitionq.HTTPOutcomeHeader, "dead-letter")
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, "corrupt file")
		case "later":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case "date":
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		case "bad":
			w.Header().Set("Retry-After", "soon")
			w.Header().Set(partitionq.HTTPOutcomeHeader, "maybe")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()
	h, err := partitionq.NewHTTPHandler(partitionq.HTTPHandlerConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	handle := func(payload string) error {
		return h.Handle(t.Context(), &partitionq.Event{ID: 1, Queue: "q", Group: "g", Key: "k", Slots: 1, Payload: []byte(payload), Attempt: 1, Epoch: 1})
	}
	if err := handle("ok"); err != nil {
		t.Errorf("202: %v, want done", err)
	}
	if err := handle("fail"); err == nil || err.Error() != "HTTP 500 Internal Server Error: disk full" {
		t.Errorf("500: %v", err)
	}
	var dl *partitionq.DeadLetterError
	if err := handle("dead"); !errors.As(err, &dl) || !strings.Contains(err.Error(), "HTTP 422 Unprocessable Entity: corrupt file") {
		t.Errorf("422 with dead-letter: %v, want a dead letter", err)
	}
	var ra *partitionq.RetryAfterError
	if err := handle("later"); !errors.As(err, &ra) || ra.Delay() != 7*time.Second {
		t.Errorf("429 with Retry-After 7: %v, want a retry after 7s", err)
	}
	if err := handle("date"); !errors.As(err, &ra) || ra.Delay() < 59*time.Minute || ra.Delay() > time.Hour {
		t.Errorf("503 with a Retry-After date an hour ahead: %v", err)
	}
	if err := handle("bad"); err == nil || errors.As(err, &ra) || errors.As(err, &dl) ||
		!strings.Contains(err.Error(), `"maybe" is not an outcome partitionq knows`) || !strings.Contains(err.Error(), `Retry-After "soon"`) {
		t.Errorf("unknown outcome and Retry-After: %v, want a plain failure saying both", err)
	}
	if err := handle("redirect"); err == nil || !strings.Contains(err.Error(), "HTTP 307") {
		t.Errorf("a redirect: %v, want a failure", err)
	}
}

func TestHTTPHandlerConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  partitionq.HTTPHandlerConfig
		want string
	}{
		{partitionq.HTTPHandlerConfig{}, "invalid HTTPHandlerConfig.URL \"\": it is empty"},
		{partitionq.HTTPHandlerConfig{URL: "ftp://x/"}, "it is not an http or https URL"},
		{partitionq.HTTPHandlerConfig{URL: "/events"}, "it is not an http or https URL"},
		{partitionq.HTTPHandlerConfig{URL: "http://u:p@x/"}, "it holds credentials"},
		{partitionq.HTTPHandlerConfig{URL: "http://x/", MaxConns: -1}, "invalid HTTPHandlerConfig.MaxConns -1: it is negative"},
	} {
		_, err := partitionq.NewHTTPHandler(c.cfg)
		if !errors.Is(err, partitionq.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// docs/cli.md lists every header the HTTP handler sends.
func TestHTTPHandlerHeadersAreDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	seen := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	h, err := partitionq.NewHTTPHandler(partitionq.HTTPHandlerConfig{URL: srv.URL, Authorize: func(r *http.Request) error {
		r.Header.Set("Authorization", "Bearer x")
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Handle(t.Context(), &partitionq.Event{ID: 1, Queue: "q", Group: "g", Key: "k", Type: "T", Slots: 1, Epoch: 1, Attempt: 1,
		Time: time.Now(), Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for name := range <-seen {
		if n := strings.ToLower(name); n != "accept-encoding" && n != "content-length" && !strings.Contains(doc, "| `"+n+"`") && !strings.Contains(doc, ", `"+n+"` |") {
			t.Errorf("docs/cli.md does not list the header %s the HTTP handler sends", n)
		}
	}
}
